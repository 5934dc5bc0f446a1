/* Making a call's future in C: the compiled frame loop's part of call_future.py.
 *
 * A CallFuture's fields are slots (C members of its instances, see call_future.py), and the
 * submit path of every future call used to fill them in a Python __init__: a frame and ten
 * attribute stores per call. A FutureMaker, made once per connection by future_maker(),
 * knows where each slot lies and fills them all in one C call with nothing else to look up:
 *
 *     make = _cframes.future_maker(CallFuture, _Watched, FIELDS, connection, condition,
 *                                  PENDING)
 *     future = make(call_id, deadline, on_failure)   # CallFuture(connection, call_id, ...)
 *
 * The future it returns is the one __init__ makes, field for field (test_future_maker.py). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

PyObject *future_maker(PyObject *self, PyObject *args);  /* Called by _frames.c's table. */
int future_init(void);
PyObject **future_field(PyObject *maker, PyObject *future, int field);  /* For _settle.c. */

/* The slots a maker fills, in the order of call_future.FIELDS (_settle.c names the ones it
 * reads again: keep both in step). */
enum { CONDITION, WAITERS, MUX, CALL_ID, DEADLINE, ON_FAILURE, STATE, RESULT, EXCEPTION,
       CALLBACKS, N_FIELDS };

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;  /* maker_call: a call costs no argument tuple. */
    PyTypeObject *cls;      /* CallFuture. */
    PyTypeObject *watched;  /* _Watched: a future's waiter list, which knows its future. */
    Py_ssize_t offsets[N_FIELDS];
    Py_ssize_t watched_future;  /* Where _Watched keeps its future. */
    PyObject *mux, *condition, *pending, *no_callbacks;
} Maker;

/* Where slot ``name`` of ``type`` lies in its instances; -1 with an exception if it is no
 * object slot (a changed call_future.py, which a stale build must not write into). */
static Py_ssize_t slot_offset(PyTypeObject *type, PyObject *name) {
    PyObject *descr = PyObject_GetAttr((PyObject *)type, name);
    if (descr == NULL) PyErr_Clear();  /* Said below, as any other field that is no slot. */
    Py_ssize_t offset = -1;
    if (descr != NULL && Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
        if (member->type == T_OBJECT_EX && !(member->flags & READONLY) &&
            member->offset >= (Py_ssize_t)sizeof(PyObject))
            offset = member->offset;
    }
    Py_XDECREF(descr);
    if (offset < 0)
        PyErr_Format(PyExc_TypeError, "future_maker: %R is no object slot of %s", name,
                     type->tp_name);
    return offset;
}

static void store(PyObject *obj, Py_ssize_t offset, PyObject *value) {
    PyObject **place = (PyObject **)((char *)obj + offset);
    Py_INCREF(value);
    Py_XSETREF(*place, value);
}

/* make(call_id, deadline, on_failure) -> a new CallFuture of this maker's connection. */
static PyObject *maker_call(PyObject *self, PyObject *const *args, size_t nargsf,
                            PyObject *kwnames) {
    Maker *maker = (Maker *)self;
    if (PyVectorcall_NARGS(nargsf) != 3 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "make(call_id, deadline, on_failure)");
        return NULL;
    }
    PyObject *future = maker->cls->tp_alloc(maker->cls, 0);  /* No __init__: filled here. */
    if (future == NULL) return NULL;
    PyObject *waiters = maker->watched->tp_alloc(maker->watched, 0);  /* An empty list. */
    if (waiters == NULL) {
        Py_DECREF(future);
        return NULL;
    }
    store(waiters, maker->watched_future, future);
    const Py_ssize_t *at = maker->offsets;
    store(future, at[CONDITION], maker->condition);
    store(future, at[WAITERS], waiters);
    Py_DECREF(waiters);
    store(future, at[MUX], maker->mux);
    store(future, at[CALL_ID], args[0]);
    store(future, at[DEADLINE], args[1]);
    store(future, at[ON_FAILURE], args[2]);
    store(future, at[STATE], maker->pending);
    store(future, at[RESULT], Py_None);
    store(future, at[EXCEPTION], Py_None);
    store(future, at[CALLBACKS], maker->no_callbacks);
    return future;
}

static int maker_traverse(PyObject *self, visitproc visit, void *arg) {
    Maker *maker = (Maker *)self;
    Py_VISIT(maker->cls);
    Py_VISIT(maker->watched);
    Py_VISIT(maker->mux);
    Py_VISIT(maker->condition);
    Py_VISIT(maker->pending);
    Py_VISIT(maker->no_callbacks);
    return 0;
}

static int maker_clear(PyObject *self) {
    Maker *maker = (Maker *)self;
    Py_CLEAR(maker->cls);
    Py_CLEAR(maker->watched);
    Py_CLEAR(maker->mux);
    Py_CLEAR(maker->condition);
    Py_CLEAR(maker->pending);
    Py_CLEAR(maker->no_callbacks);
    return 0;
}

static void maker_dealloc(PyObject *self) {
    PyObject_GC_UnTrack(self);
    maker_clear(self);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *maker_tp_call(PyObject *self, PyObject *args, PyObject *kwargs) {
    return PyVectorcall_Call(self, args, kwargs);
}

static PyTypeObject MakerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "launchpad_py.courier._cframes.FutureMaker",
    .tp_doc = "make(call_id, deadline, on_failure): a new future of one connection.",
    .tp_basicsize = sizeof(Maker),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Maker, vectorcall),
    .tp_call = maker_tp_call,
    .tp_traverse = maker_traverse,
    .tp_clear = maker_clear,
    .tp_dealloc = maker_dealloc,
};

int future_init(void) { return PyType_Ready(&MakerType); }

/* Where ``future`` keeps field ``field`` (an index of call_future.FIELDS) when ``maker`` is a
 * FutureMaker whose class is exactly the future's, else NULL (_settle.c then asks by name). */
PyObject **future_field(PyObject *maker, PyObject *future, int field) {
    if (!Py_IS_TYPE(maker, &MakerType) || field < 0 || field >= N_FIELDS) return NULL;
    Maker *made = (Maker *)maker;
    if (Py_TYPE(future) != made->cls) return NULL;
    return (PyObject **)((char *)future + made->offsets[field]);
}

/* future_maker(cls, watched, fields, mux, condition, pending) -> make (see the top). */
PyObject *future_maker(PyObject *self, PyObject *args) {
    PyObject *cls, *watched, *fields, *mux, *condition, *pending;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!O!OOO:future_maker", &PyType_Type, &cls, &PyType_Type,
                          &watched, &PyTuple_Type, &fields, &mux, &condition, &pending))
        return NULL;
    if (PyTuple_GET_SIZE(fields) != N_FIELDS) {
        PyErr_Format(PyExc_TypeError, "future_maker: %d fields expected", N_FIELDS);
        return NULL;
    }
    if (!PyType_IsSubtype((PyTypeObject *)watched, &PyList_Type)) {
        PyErr_SetString(PyExc_TypeError, "future_maker: watched must be a list type");
        return NULL;
    }
    Maker *maker = PyObject_GC_New(Maker, &MakerType);
    if (maker == NULL) return NULL;
    maker->vectorcall = maker_call;
    maker->cls = maker->watched = NULL;
    maker->mux = maker->condition = maker->pending = maker->no_callbacks = NULL;
    for (Py_ssize_t i = 0; i < N_FIELDS; i++) {
        maker->offsets[i] = slot_offset((PyTypeObject *)cls, PyTuple_GET_ITEM(fields, i));
        if (maker->offsets[i] < 0) goto fail;
    }
    PyObject *future_name = PyUnicode_InternFromString("future");
    if (future_name == NULL) goto fail;
    maker->watched_future = slot_offset((PyTypeObject *)watched, future_name);
    Py_DECREF(future_name);
    if (maker->watched_future < 0) goto fail;
    maker->no_callbacks = PyTuple_New(0);
    if (maker->no_callbacks == NULL) goto fail;
    Py_INCREF(cls);
    maker->cls = (PyTypeObject *)cls;
    Py_INCREF(watched);
    maker->watched = (PyTypeObject *)watched;
    Py_INCREF(mux);
    maker->mux = mux;
    Py_INCREF(condition);
    maker->condition = condition;
    Py_INCREF(pending);
    maker->pending = pending;
    PyObject_GC_Track((PyObject *)maker);
    return (PyObject *)maker;
fail:
    Py_DECREF(maker);
    return NULL;
}
