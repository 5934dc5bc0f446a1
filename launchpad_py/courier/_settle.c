/* Completing a future's call in C: the compiled frame loop's part of futures_connection.py.
 *
 * A reply to a future cost its reader two Python calls (decode_reply, then CallFuture.deliver
 * under the connection's lock) on top of take_replies. When nothing waits on the future but
 * the reading thread itself (no wait()/as_completed waiter, no done-callback, no caller asleep
 * on the connection's condition), the reply's whole effect is two attribute stores under that
 * lock: take_replies makes them here, through settle_reply, taking the lock without blocking.
 * Everything else goes back to Python as before: a remote exception, a waiter to wake, the
 * lock held by another thread, a device-arrays decode, an entry with another decode. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Declared again in _frames.c, which calls them (no header: setup.py ships the sources). */
int settle_init(void);
int settle_valid(PyObject *settle);
int settle_reply(PyObject *settle, PyObject *entry, PyObject *key, const char *pickle,
                 Py_ssize_t length, PyObject **outcome);

enum { SETTLE_LEFT, SETTLE_DONE };  /* settle_reply's answers, besides -1 (an exception). */

/* The ``settle`` tuple futures_connection.py builds once per connection; MAKER is the
 * connection's FutureMaker (_future.c), whose futures' fields are read and stored in place. */
enum { DECODE, SERIALIZATION, LOADS, WATCHED, LOCK, SLEEPERS, PENDING, FINISHED, MAKER,
       SETTLE_SIZE };

/* _future.c: where a future the maker made keeps a field (indices of call_future.FIELDS). */
PyObject **future_field(PyObject *maker, PyObject *future, int field);
enum { F_WAITERS = 1, F_STATE = 6, F_RESULT = 7, F_CALLBACKS = 9 };

static PyObject *s_device_decodes, *s_state, *s_result, *s_waiters, *s_callbacks, *s_acquire,
    *s_release, *s_ok;

int settle_init(void) {
    s_device_decodes = PyUnicode_InternFromString("device_decodes");
    s_state = PyUnicode_InternFromString("_state");
    s_result = PyUnicode_InternFromString("_result");
    s_waiters = PyUnicode_InternFromString("_waiters");
    s_callbacks = PyUnicode_InternFromString("_done_callbacks");
    s_acquire = PyUnicode_InternFromString("acquire");
    s_release = PyUnicode_InternFromString("release");
    s_ok = PyUnicode_InternFromString("ok");
    return s_device_decodes && s_state && s_result && s_waiters && s_callbacks && s_acquire &&
           s_release && s_ok ? 0 : -1;
}

int settle_valid(PyObject *settle) {
    if (settle == Py_None) return 1;
    if (PyTuple_CheckExact(settle) && PyTuple_GET_SIZE(settle) == SETTLE_SIZE &&
        PySet_Check(PyTuple_GET_ITEM(settle, WATCHED)))
        return 1;
    PyErr_SetString(PyExc_TypeError, "take_replies: settle must be None or the 9-tuple "
                                     "futures_connection.py builds");
    return 0;
}

/* Whether ``obj.name`` is an empty sized container: 1, 0, or -1 with an exception. */
static int empty_attr(PyObject *obj, PyObject *name) {
    PyObject *value = PyObject_GetAttr(obj, name);
    if (value == NULL) return -1;
    Py_ssize_t size = PyObject_Length(value);
    Py_DECREF(value);
    return size < 0 ? -1 : size == 0;
}

/* The size of a future's waiter list or callbacks read in place: -2 when it is no list or
 * tuple (then asked by name). */
static Py_ssize_t held_size(PyObject *held) {
    if (held == NULL) return -2;
    if (PyList_Check(held)) return PyList_GET_SIZE(held);
    return PyTuple_CheckExact(held) ? PyTuple_GET_SIZE(held) : -2;
}

/* quiet() for a future the connection's maker made: its fields read in place. 1, 0, or -2
 * when a field is not what the maker stored (then asked by name). */
static int quiet_in_place(PyObject *settle, PyObject *future) {
    PyObject *maker = PyTuple_GET_ITEM(settle, MAKER);
    PyObject **state = future_field(maker, future, F_STATE);
    if (state == NULL || *state == NULL) return -2;
    if (*state != PyTuple_GET_ITEM(settle, PENDING)) return -2;  /* Any other: by name. */
    Py_ssize_t waiters = held_size(*future_field(maker, future, F_WAITERS));
    Py_ssize_t callbacks = held_size(*future_field(maker, future, F_CALLBACKS));
    if (waiters == -2 || callbacks == -2) return -2;
    return waiters == 0 && callbacks == 0;
}

/* 1 when only the reader cares about ``future``: still pending, no waiter of wait() or
 * as_completed, no done-callback, and nobody asleep on the connection's condition (those
 * Python's deliver wakes). 0 otherwise, -1 with an exception. */
static int quiet(PyObject *settle, PyObject *future) {
    Py_ssize_t asleep = PyObject_Length(PyTuple_GET_ITEM(settle, SLEEPERS));
    if (asleep != 0) return asleep < 0 ? -1 : 0;
    int in_place = quiet_in_place(settle, future);
    if (in_place != -2) return in_place;
    PyObject *state = PyObject_GetAttr(future, s_state);
    if (state == NULL) return -1;
    int pending = PyObject_RichCompareBool(state, PyTuple_GET_ITEM(settle, PENDING), Py_EQ);
    Py_DECREF(state);
    if (pending <= 0) return pending;
    int empty = empty_attr(future, s_waiters);
    return empty <= 0 ? empty : empty_attr(future, s_callbacks);
}

/* 1 when decode_reply would call pickle.loads directly: no device-arrays decode runs. */
static int plain_decodes(PyObject *settle) {
    PyObject *count = PyObject_GetAttr(PyTuple_GET_ITEM(settle, SERIALIZATION), s_device_decodes);
    if (count == NULL) return -1;
    int running = PyObject_IsTrue(count);
    Py_DECREF(count);
    return running < 0 ? -1 : !running;
}

/* Releases ``lock`` keeping an exception already raised (3.12's API where it exists:
 * PyErr_Fetch is deprecated there): 0, or -1 if releasing failed (that exception then). */
static int release(PyObject *lock) {
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *raised = PyErr_GetRaisedException();
#else
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
#endif
    PyObject *released = PyObject_CallMethodNoArgs(lock, s_release);
#if PY_VERSION_HEX >= 0x030C0000
    if (released == NULL) Py_XDECREF(raised);
    else PyErr_SetRaisedException(raised);
#else
    if (released == NULL) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
    } else {
        PyErr_Restore(type, value, traceback);
    }
#endif
    Py_XDECREF(released);
    return released == NULL ? -1 : 0;
}

/* Stores the value of an ('ok', value) outcome in ``future`` if it is still quiet, under the
 * connection's lock taken without blocking: 1 settled, 0 not, -1 with an exception. */
static int store_result(PyObject *settle, PyObject *future, PyObject *outcome) {
    PyObject *lock = PyTuple_GET_ITEM(settle, LOCK);
    PyObject *got = PyObject_CallMethodOneArg(lock, s_acquire, Py_False);
    if (got == NULL) return -1;
    int locked = PyObject_IsTrue(got);
    Py_DECREF(got);
    if (locked <= 0) return locked;  /* Held by a thread in wait_for or cancel: Python's turn. */
    int done = quiet(settle, future);  /* Unpickling ran Python code: look again, locked. */
    PyObject *maker = PyTuple_GET_ITEM(settle, MAKER);
    PyObject **result = future_field(maker, future, F_RESULT);
    if (done == 1 && result != NULL) {  /* Its slots, stored in place (None replaced). */
        PyObject *value = PyTuple_GET_ITEM(outcome, 1);
        PyObject *finished = PyTuple_GET_ITEM(settle, FINISHED);
        PyObject **state = future_field(maker, future, F_STATE);
        Py_INCREF(value);
        Py_XSETREF(*result, value);
        Py_INCREF(finished);
        Py_XSETREF(*state, finished);
    } else if (done == 1 &&
        (PyObject_SetAttr(future, s_result, PyTuple_GET_ITEM(outcome, 1)) < 0 ||
         PyObject_SetAttr(future, s_state, PyTuple_GET_ITEM(settle, FINISHED)) < 0)) {
        done = -1;
    }
    return release(lock) < 0 ? -1 : done;
}

/* ('raised', the exception being raised), taken from the error indicator: what
 * serialization.reply_value raises, as Python's own decode of the reply would have. */
static PyObject *raised_outcome(void) {
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc = PyErr_GetRaisedException();
#else
    PyObject *type, *exc, *traceback;
    PyErr_Fetch(&type, &exc, &traceback);
    PyErr_NormalizeException(&type, &exc, &traceback);
    if (exc != NULL && traceback != NULL) PyException_SetTraceback(exc, traceback);
    Py_XDECREF(type);
    Py_XDECREF(traceback);
#endif
    if (exc == NULL) return NULL;
    PyObject *outcome = Py_BuildValue("(sN)", "raised", exc);
    return outcome;
}

/* Whether an unpickled reply is ('ok', value): a call's value, not its remote exception. */
static int is_ok(PyObject *outcome) {
    if (!PyTuple_CheckExact(outcome) || PyTuple_GET_SIZE(outcome) != 2) return 0;
    PyObject *status = PyTuple_GET_ITEM(outcome, 0);
    return PyUnicode_Check(status) && PyUnicode_Compare(status, s_ok) == 0;
}

/* settle_reply(settle, entry, key, pickle, length, &outcome): 1 when the reply to ``entry``
 * (popped from the pending table under ``key``) completed its future here; 0 when Python
 * must, then with ``*outcome`` the reply unpickled (a new reference; ('raised', exception)
 * if unpickling it raised) or NULL if it was not unpickled;
 * -1 with an exception. */

int settle_reply(PyObject *settle, PyObject *entry, PyObject *key, const char *pickle,
                 Py_ssize_t length, PyObject **outcome) {
    *outcome = NULL;
    if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 3 ||
        PyTuple_GET_ITEM(entry, 2) != PyTuple_GET_ITEM(settle, DECODE))
        return SETTLE_LEFT;
    PyObject *future = PyTuple_GET_ITEM(entry, 0);
    int ready = plain_decodes(settle);
    if (ready == 1) ready = quiet(settle, future);  /* Else unpickling it here is wasted. */
    if (ready <= 0) return ready < 0 ? -1 : SETTLE_LEFT;
    PyObject *pickled = PyBytes_FromStringAndSize(pickle, length);
    if (pickled == NULL) return -1;
    PyObject *decoded = PyObject_CallOneArg(PyTuple_GET_ITEM(settle, LOADS), pickled);
    Py_DECREF(pickled);
    if (decoded == NULL) {  /* Python fails the future with it, as when its decode raises. */
        *outcome = raised_outcome();
        return *outcome == NULL ? -1 : SETTLE_LEFT;
    }
    int done = is_ok(decoded) ? store_result(settle, future, decoded) : 0;
    if (done < 0) {
        Py_DECREF(decoded);
        return -1;
    }
    if (done == 0) {  /* Python settles it from the outcome, not unpickled again. */
        *outcome = decoded;
        return SETTLE_LEFT;
    }
    Py_DECREF(decoded);
    PyObject *watched = PyTuple_GET_ITEM(settle, WATCHED);
    if (PySet_GET_SIZE(watched) > 0 && PySet_Discard(watched, key) < 0) return -1;
    return SETTLE_DONE;
}
