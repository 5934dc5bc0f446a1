/* The compiled frame loop of the courier socket paths: launchpad_py.courier._cframes.
 *
 * A tiny call spends most of its Python time receiving a frame and taking its header
 * apart, and building and sending the next one. These two functions do that for the
 * common frame (no buffers, nothing released, no shared memory) with the GIL released
 * around the system calls; everything else stays with frames.py, which also falls back
 * to its own code when this module is absent or LP_COURIER_PURE=1.
 *
 * Header (frames.HEADER, '<QBxHIQQQ', 40 bytes, little-endian):
 *   0 call_id u64 | 8 kind u8 | 9 pad | 10 released count u16 | 12 buffer count u32 |
 *   16 pickle length u64 | 24 segment id u64 | 32 segment size u64
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define HEADER_SIZE 40
#define MAX_FDS 16

static uint64_t load_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static void store_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) { p[i] = (unsigned char)(v & 0xff); v >>= 8; }
}

enum { RETRY, WOULD_BLOCK, FAILED };

/* What to do after a system call failed (errno): retry it (interrupted, no Python signal
 * handler raised), give up for now (the socket would block: Python's calls wait for it), or
 * raise (the exception is set). */
static int after_failure(void) {
    if (errno == EINTR) return PyErr_CheckSignals() < 0 ? FAILED : RETRY;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return WOULD_BLOCK;
    PyErr_SetFromErrno(PyExc_OSError);
    return FAILED;
}

/* Appends the descriptors of an SCM_RIGHTS message to *fds (made on first use). */
static int collect_fds(struct msghdr *msg, PyObject **fds) {
    for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c != NULL; c = CMSG_NXTHDR(msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        int *data = (int *)CMSG_DATA(c);
        for (size_t i = 0; i < n; i++) {
            if (*fds == NULL && (*fds = PyList_New(0)) == NULL) return -1;
            PyObject *fd = PyLong_FromLong(data[i]);
            if (fd == NULL || PyList_Append(*fds, fd) < 0) { Py_XDECREF(fd); return -1; }
            Py_DECREF(fd);
        }
    }
    return 0;
}

/* One receive into buf[end:cap]: bytes received, 0 at end of stream, -1 on error with
 * errno set. Descriptors that come along are added to *fds (ancillary only). */
static Py_ssize_t receive(int fd, char *into, Py_ssize_t room, int ancillary, PyObject **fds,
                          int *fds_error) {
    Py_ssize_t n;
    if (!ancillary) {
        Py_BEGIN_ALLOW_THREADS
        n = recv(fd, into, (size_t)room, 0);
        Py_END_ALLOW_THREADS
        return n;
    }
    union { struct cmsghdr align; char space[CMSG_SPACE(MAX_FDS * sizeof(int))]; } control;
    struct iovec iov = {into, (size_t)room};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.space;
    msg.msg_controllen = sizeof control.space;
    Py_BEGIN_ALLOW_THREADS
    n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    Py_END_ALLOW_THREADS
    if (n >= 0 && msg.msg_controllen > 0 && collect_fds(&msg, fds) < 0) *fds_error = 1;
    return n;
}

/* Closes every descriptor in the list ``fds`` (NULL: none): those received with a frame
 * that is not handed over because the call raises. */
static void close_all(PyObject *fds) {
    if (fds == NULL)
        return;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(fds); i++)
        close((int)PyLong_AsLong(PyList_GET_ITEM(fds, i)));
}

/* Whether buf[start:end] begins with a whole small frame (no buffers, nothing released, no
 * shared memory): a server that finds one holds its reply back to leave with the next. */
static int small_frame_at(const unsigned char *base, Py_ssize_t start, Py_ssize_t end) {
    if (end - start < HEADER_SIZE)
        return 0;
    const unsigned char *h = base + start;
    if (h[10] | h[11] | h[12] | h[13] | h[14] | h[15] || load_u64(h + 24))
        return 0;
    return (uint64_t)(end - start - HEADER_SIZE) >= load_u64(h + 16);
}

/* recv_small(fd, buf, start, end, ancillary, limit) ->
 *     (pickled | None, call_id, kind, start, end, fds | None, eof, more)
 *
 * Receives into the scratch buffer ``buf`` (bytearray; unread bytes are buf[start:end])
 * until a small frame is complete, and returns its pickle as bytes. ``pickled`` is None
 * when the next frame is not small, its pickle is longer than ``limit`` (frames.py refuses
 * it), it does not fit behind ``start``, the socket would block
 * (it has a timeout: Python's own calls wait for it), or the stream ended (``eof``): then
 * frames.py goes on from the returned start and end. Descriptors received are returned.
 * ``more``: after the frame returned, another whole small frame is already buffered (as
 * frames.Reader.has_small_frame says, without a Python call per request). */
static PyObject *recv_small(PyObject *self, PyObject *args) {
    int fd, ancillary;
    Py_buffer view;
    Py_ssize_t start, end, limit;
    (void)self;
    if (!PyArg_ParseTuple(args, "iw*nnpn", &fd, &view, &start, &end, &ancillary, &limit))
        return NULL;
    unsigned char *base = view.buf;
    Py_ssize_t cap = view.len;
    PyObject *fds = NULL, *pickled = NULL, *result = NULL;
    uint64_t call_id = 0;
    int kind = 0, eof = 0, fds_error = 0;
    if (start < 0 || end < start || end > cap) {
        PyErr_SetString(PyExc_ValueError, "recv_small: start and end outside the buffer");
        goto done;
    }
    for (;;) {
        Py_ssize_t avail = end - start;
        if (avail >= HEADER_SIZE) {
            const unsigned char *h = base + start;
            uint16_t n_released = (uint16_t)(h[10] | (h[11] << 8));
            uint32_t n_buffers = (uint32_t)h[12] | ((uint32_t)h[13] << 8) |
                                 ((uint32_t)h[14] << 16) | ((uint32_t)h[15] << 24);
            uint64_t pickle_len = load_u64(h + 16), segment_id = load_u64(h + 24);
            if (n_released || n_buffers || segment_id) break;  /* Not small: frames.py. */
            if (pickle_len > (uint64_t)limit) break;  /* Too large: frames.py refuses it. */
            if (pickle_len > (uint64_t)(cap - start - HEADER_SIZE)) break;  /* Does not fit. */
            if ((uint64_t)(avail - HEADER_SIZE) >= pickle_len) {
                call_id = load_u64(h);
                kind = h[8];
                pickled = PyBytes_FromStringAndSize((const char *)h + HEADER_SIZE,
                                                    (Py_ssize_t)pickle_len);
                if (pickled == NULL) goto done;
                start += HEADER_SIZE + (Py_ssize_t)pickle_len;
                break;
            }
        }
        if (start == end) start = end = 0;  /* Nothing unread: receive at the front again. */
        if (end == cap) break;  /* Full: frames.py moves what is unread to the front. */
        Py_ssize_t n = receive(fd, (char *)base + end, cap - end, ancillary, &fds, &fds_error);
        if (fds_error) goto done;
        if (n < 0) {
            int next = after_failure();
            if (next == RETRY) continue;
            if (next == WOULD_BLOCK) break;
            goto done;
        }
        if (n == 0) {
            eof = 1;
            break;
        }
        end += n;
    }
    result = Py_BuildValue("(OKinnOii)", pickled ? pickled : Py_None,
                           (unsigned long long)call_id, kind, start, end,
                           fds ? fds : Py_None, eof,
                           pickled != NULL && small_frame_at(base, start, end));
done:
    if (result == NULL)  /* Raising: close what came, nobody will. */
        close_all(fds);
    Py_XDECREF(pickled);
    Py_XDECREF(fds);
    PyBuffer_Release(&view);
    return result;
}

/* send_small(fd, call_id, kind, pickled) -> bytes sent
 *
 * Writes the header and the pickle of a small frame with one sendmsg (no joined copy),
 * the GIL released. Returns fewer than 40 + len(pickled) bytes only when the socket would
 * block (it has a timeout): frames.py then sends the rest its own way. */
static PyObject *send_small(PyObject *self, PyObject *args) {
    int fd, kind;
    unsigned long long call_id;
    Py_buffer pickled;
    (void)self;
    if (!PyArg_ParseTuple(args, "iKiy*", &fd, &call_id, &kind, &pickled)) return NULL;
    unsigned char header[HEADER_SIZE];
    memset(header, 0, sizeof header);
    store_u64(header, call_id);
    header[8] = (unsigned char)kind;
    store_u64(header + 16, (uint64_t)pickled.len);
    Py_ssize_t total = HEADER_SIZE + pickled.len, sent = 0;
    while (sent < total) {
        struct iovec iov[2];
        int count = 0;
        if (sent < HEADER_SIZE) {
            iov[count].iov_base = header + sent;
            iov[count++].iov_len = (size_t)(HEADER_SIZE - sent);
            iov[count].iov_base = pickled.buf;
            iov[count++].iov_len = (size_t)pickled.len;
        } else {
            iov[count].iov_base = (char *)pickled.buf + (sent - HEADER_SIZE);
            iov[count++].iov_len = (size_t)(total - sent);
        }
        struct msghdr msg;
        memset(&msg, 0, sizeof msg);
        msg.msg_iov = iov;
        msg.msg_iovlen = (size_t)count;
        Py_ssize_t n;
        Py_BEGIN_ALLOW_THREADS
        n = sendmsg(fd, &msg, MSG_NOSIGNAL);
        Py_END_ALLOW_THREADS
        if (n < 0) {
            int next = after_failure();
            if (next == RETRY) continue;
            if (next == WOULD_BLOCK) break;
            goto error;
        }
        sent += n;
    }
    PyBuffer_Release(&pickled);
    return PyLong_FromSsize_t(sent);
error:
    PyBuffer_Release(&pickled);
    return NULL;
}

/* ---- Reply matching for futures (futures_connection.py) -----------------------------------
 *
 * A connection carrying many futures used to read one reply per Python round (read, build a
 * Frame, take the pending table's lock, pop the entry). take_replies does that for every
 * small reply already received in one call: the pending table is a plain dict, popped here
 * with the GIL held (no Python code runs between the lookup and the removal, so no lock is
 * needed: whoever pops an entry completes its future). */

enum { REPLY_READY, REPLY_NEED_MORE, REPLY_OTHER };

/* What the bytes at base[start:end] hold: a whole small frame (*call_id, *pickle_len set), the
 * start of one that can still arrive behind ``start``, or a frame frames.py must read. */
static int reply_at(const unsigned char *base, Py_ssize_t start, Py_ssize_t end, Py_ssize_t cap,
                    Py_ssize_t limit, uint64_t *call_id, Py_ssize_t *pickle_len) {
    if (end - start < HEADER_SIZE) return REPLY_NEED_MORE;
    const unsigned char *h = base + start;
    int counted = h[10] | h[11] | h[12] | h[13] | h[14] | h[15];
    uint64_t length = load_u64(h + 16);
    if (counted || load_u64(h + 24)) return REPLY_OTHER;  /* Buffers, released ids, shm. */
    if (length > (uint64_t)limit || length > (uint64_t)(cap - start - HEADER_SIZE))
        return REPLY_OTHER;  /* Too large here: frames.py refuses it or reads it in parts. */
    if ((uint64_t)(end - start - HEADER_SIZE) < length) return REPLY_NEED_MORE;
    *call_id = load_u64(h);
    *pickle_len = (Py_ssize_t)length;
    return REPLY_READY;
}

/* _future.c: making a call's future without Python code (see there). */
PyObject *future_maker(PyObject *self, PyObject *args);
int future_init(void);

/* _settle.c: completing a future's call without Python code (see there). */
int settle_init(void);
int settle_valid(PyObject *settle);
int settle_reply(PyObject *settle, PyObject *entry, PyObject *key, const char *pickle,
                 Py_ssize_t length, PyObject **outcome);

/* Pops ``call_id`` from ``pending``; with ``settle`` (not None) completes its future if
 * _settle.c can (counted in *settled), else appends (entry, pickle, ()) to ``replies`` (the
 * empty tuple: a small frame's buffers), or (entry, outcome, None) when _settle.c unpickled it
 * already. A reply to a call no longer pending (it timed out, or failed) is dropped. */
static int match_reply(PyObject *pending, PyObject *replies, PyObject *settle, uint64_t call_id,
                       const unsigned char *pickle, Py_ssize_t length, Py_ssize_t *settled) {
    PyObject *key = PyLong_FromUnsignedLongLong(call_id);
    if (key == NULL) return -1;
    PyObject *entry = PyDict_GetItemWithError(pending, key);  /* Borrowed. */
    if (entry == NULL) {
        Py_DECREF(key);
        return PyErr_Occurred() ? -1 : 0;
    }
    Py_INCREF(entry);
    int failed = PyDict_DelItem(pending, key) < 0;
    PyObject *outcome = NULL, *reply = NULL;
    if (!failed && settle != Py_None) {
        int done = settle_reply(settle, entry, key, (const char *)pickle, length, &outcome);
        failed = done < 0;
        if (done == 1) {
            (*settled)++;
            Py_DECREF(key);
            Py_DECREF(entry);
            return 0;
        }
    }
    Py_DECREF(key);
    if (!failed && outcome != NULL) {
        reply = PyTuple_Pack(3, entry, outcome, Py_None);
    } else if (!failed) {
        PyObject *pickled = PyBytes_FromStringAndSize((const char *)pickle, length);
        PyObject *none = pickled == NULL ? NULL : PyTuple_New(0);
        reply = none == NULL ? NULL : PyTuple_Pack(3, entry, pickled, none);
        Py_XDECREF(none);
        Py_XDECREF(pickled);
    }
    failed = reply == NULL || PyList_Append(replies, reply) < 0;
    Py_XDECREF(reply);
    Py_XDECREF(outcome);
    Py_DECREF(entry);
    return failed ? -1 : 0;
}

enum { TAKEN, NEXT_OTHER, STREAM_ENDED, WOULD_WAIT };

/* take_replies(fd, buf, start, end, ancillary, limit, pending, settle=None) ->
 *     (replies, start, end, fds | None, status, settled)
 *
 * Receives into ``buf`` (unread bytes are buf[start:end]) until a small frame is complete,
 * then takes it and every other small frame already received: ``replies`` lists
 * (entry, pickle, ()) for those whose call id ``pending`` held (popped from it). ``status`` says
 * why it stopped: 0 nothing more is received, 1 the next frame is another kind (or does not
 * fit, or is longer than ``limit``: frames.py reads it), 2 the stream ended, 3 the socket
 * would block (it has a timeout). Descriptors received are returned, as recv_small's.
 * ``settle`` (futures_connection.py's tuple): replies whose futures _settle.c completed are
 * not listed, only counted in ``settled``. */
static PyObject *take_replies(PyObject *self, PyObject *args) {
    int fd, ancillary;
    Py_buffer view;
    Py_ssize_t start, end, limit;
    PyObject *pending, *settle = Py_None;
    (void)self;
    if (!PyArg_ParseTuple(args, "iw*nnpnO!|O", &fd, &view, &start, &end, &ancillary, &limit,
                          &PyDict_Type, &pending, &settle))
        return NULL;
    if (!settle_valid(settle)) {
        PyBuffer_Release(&view);
        return NULL;
    }
    Py_ssize_t settled = 0;
    unsigned char *base = view.buf;
    Py_ssize_t cap = view.len;
    PyObject *fds = NULL, *result = NULL, *replies = PyList_New(0);
    int status = TAKEN, fds_error = 0, took = 0;
    if (replies == NULL) goto done;
    if (start < 0 || end < start || end > cap) {
        PyErr_SetString(PyExc_ValueError, "take_replies: start and end outside the buffer");
        goto done;
    }
    for (;;) {
        uint64_t call_id;
        Py_ssize_t length;
        int found = reply_at(base, start, end, cap, limit, &call_id, &length);
        if (found == REPLY_READY) {
            if (match_reply(pending, replies, settle, call_id, base + start + HEADER_SIZE, length,
                            &settled) < 0)
                goto done;
            start += HEADER_SIZE + length;
            took = 1;
            continue;
        }
        if (found == REPLY_OTHER) { status = NEXT_OTHER; break; }
        if (took) break;  /* What was received is taken; the rest of a frame is still coming. */
        if (start == end) start = end = 0;  /* Nothing unread: receive at the front again. */
        if (end == cap) { status = NEXT_OTHER; break; }  /* Full: frames.py moves it. */
        Py_ssize_t n = receive(fd, (char *)base + end, cap - end, ancillary, &fds, &fds_error);
        if (fds_error) goto done;
        if (n < 0) {
            int next = after_failure();
            if (next == RETRY) continue;
            if (next == WOULD_BLOCK) { status = WOULD_WAIT; break; }
            goto done;
        }
        if (n == 0) { status = STREAM_ENDED; break; }
        end += n;
    }
    result = Py_BuildValue("(OnnOin)", replies, start, end, fds ? fds : Py_None, status, settled);
done:
    if (result == NULL)  /* Raising: close what came, nobody will. */
        close_all(fds);
    Py_XDECREF(replies);
    Py_XDECREF(fds);
    PyBuffer_Release(&view);
    return result;
}

/* peer_gone(fd) -> bool: whether an idle stream socket's peer closed it (or sent what no
 * server sends unasked), without blocking: one recv(MSG_PEEK | MSG_DONTWAIT), and no Python
 * exception for the usual answer (nothing there yet). */
static PyObject *peer_gone(PyObject *self, PyObject *args) {
    int fd;
    char byte;
    (void)self;
    if (!PyArg_ParseTuple(args, "i", &fd)) return NULL;
    ssize_t n;
    do {
        n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) Py_RETURN_FALSE;
    Py_RETURN_TRUE;  /* Ended (0), data nobody asked for (> 0), or broken (< 0). */
}

/* ---- A server's answer and its next request in one release of the GIL (socket_serving.py) --
 *
 * A reader thread that answers a synchronous call sends the reply, then waits for the next
 * request: two system calls, and between them the thread used to take the GIL back only to
 * release it again. With many connections' readers contending for one GIL, each
 * re-acquisition may wait for another thread's turn (a futex and a context switch). Here the
 * reply leaves and the next request's first receive is made in one release; recv_small then
 * takes the frame apart (and receives the rest, if a frame came in parts). */

/* Sends header and pickle (all of it unless the socket fails or would block) and, once all
 * is sent and ``receive_too``, receives once into ``into``: called without the GIL. */
static void send_then_receive(int fd, unsigned char *header, const char *pickle,
                              Py_ssize_t pickle_len, Py_ssize_t *sent, int *send_errno,
                              int receive_too, char *into, Py_ssize_t room,
                              struct msghdr *in_msg, Py_ssize_t *received, int *recv_errno) {
    Py_ssize_t total = HEADER_SIZE + pickle_len;
    while (*sent < total) {
        struct iovec iov[2];
        int count = 0;
        if (*sent < HEADER_SIZE) {
            iov[count].iov_base = header + *sent;
            iov[count++].iov_len = (size_t)(HEADER_SIZE - *sent);
            iov[count].iov_base = (void *)pickle;
            iov[count++].iov_len = (size_t)pickle_len;
        } else {
            iov[count].iov_base = (void *)(pickle + (*sent - HEADER_SIZE));
            iov[count++].iov_len = (size_t)(total - *sent);
        }
        struct msghdr msg;
        memset(&msg, 0, sizeof msg);
        msg.msg_iov = iov;
        msg.msg_iovlen = (size_t)count;
        Py_ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
        if (n < 0) { *send_errno = errno; return; }  /* Python finishes (or raises). */
        *sent += n;
    }
    if (!receive_too) return;
    if (in_msg != NULL) {
        struct iovec iov = {into, (size_t)room};
        in_msg->msg_iov = &iov;
        in_msg->msg_iovlen = 1;
        *received = recvmsg(fd, in_msg, MSG_CMSG_CLOEXEC);
        in_msg->msg_iov = NULL;
    } else {
        *received = recv(fd, into, (size_t)room, 0);
    }
    if (*received < 0) *recv_errno = errno;
}

/* answer_small(fd, call_id, kind, pickled, buf, start, end, ancillary, limit) ->
 *     (sent, recv_small's result | None)
 *
 * Sends a small frame (as send_small) and reads the next one (as recv_small, whose result it
 * returns), the reply's send and the request's first receive in one release of the GIL. The
 * receive is skipped when a whole frame is already buffered. When the send stopped short
 * (the socket would block, or a signal came), nothing is read: the result is None and
 * frames.py sends the rest from ``sent`` on, then reads. A failed send raises OSError. */
static PyObject *answer_small(PyObject *self, PyObject *args) {
    int fd, kind, ancillary;
    unsigned long long call_id;
    Py_buffer pickled, view;
    PyObject *buffer, *fds = NULL, *result = NULL, *read = NULL;
    Py_ssize_t start, end, limit;
    if (!PyArg_ParseTuple(args, "iKiy*Onnpn", &fd, &call_id, &kind, &pickled, &buffer, &start,
                          &end, &ancillary, &limit))
        return NULL;
    if (PyObject_GetBuffer(buffer, &view, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&pickled);
        return NULL;
    }
    if (start < 0 || end < start || end > view.len) {
        PyErr_SetString(PyExc_ValueError, "answer_small: start and end outside the buffer");
        goto done;
    }
    unsigned char header[HEADER_SIZE];
    memset(header, 0, sizeof header);
    store_u64(header, call_id);
    header[8] = (unsigned char)kind;
    store_u64(header + 16, (uint64_t)pickled.len);
    if (start == end) start = end = 0;  /* Nothing unread: receive at the front again. */
    uint64_t unused_id;
    Py_ssize_t unused_len;
    int receive_too = end < view.len && reply_at(view.buf, start, end, view.len, limit,
                                                 &unused_id, &unused_len) == REPLY_NEED_MORE;
    union { struct cmsghdr align; char space[CMSG_SPACE(MAX_FDS * sizeof(int))]; } control;
    struct msghdr in_msg;
    memset(&in_msg, 0, sizeof in_msg);
    in_msg.msg_control = control.space;
    in_msg.msg_controllen = sizeof control.space;
    Py_ssize_t sent = 0, received = 0;
    int send_errno = 0, recv_errno = 0;
    Py_BEGIN_ALLOW_THREADS
    send_then_receive(fd, header, pickled.buf, pickled.len, &sent, &send_errno, receive_too,
                      (char *)view.buf + end, view.len - end, ancillary ? &in_msg : NULL,
                      &received, &recv_errno);
    Py_END_ALLOW_THREADS
    if (send_errno && send_errno != EINTR && send_errno != EAGAIN &&
        send_errno != EWOULDBLOCK) {
        errno = send_errno;
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    if (sent < HEADER_SIZE + pickled.len) {  /* Stopped short: frames.py goes on. */
        result = Py_BuildValue("(nO)", sent, Py_None);
        goto done;
    }
    if (receive_too && received > 0) {
        end += received;
        if (ancillary && in_msg.msg_controllen > 0 && collect_fds(&in_msg, &fds) < 0) goto done;
    }
    /* Received nothing (interrupted, would block, the stream ended, or a failure):
     * recv_small meets the same condition again and answers it its way. */
    PyObject *rest = Py_BuildValue("(iOnnin)", fd, buffer, start, end, ancillary, limit);
    if (rest == NULL) goto done;
    read = recv_small(self, rest);
    Py_DECREF(rest);
    if (read == NULL) goto done;
    if (fds != NULL) {  /* Descriptors from our receive come first, as they arrived. */
        PyObject *later = PyTuple_GET_ITEM(read, 5);
        if (later != Py_None && PyList_SetSlice(fds, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, later) < 0)
            goto done;
        Py_INCREF(fds);
        Py_DECREF(later);
        PyTuple_SET_ITEM(read, 5, fds);  /* Ours alone: recv_small built it just now. */
    }
    result = Py_BuildValue("(nO)", sent, read);
done:
    if (result == NULL)  /* Raising: close what came, nobody will. */
        close_all(fds);
    Py_XDECREF(read);
    Py_XDECREF(fds);
    PyBuffer_Release(&view);
    PyBuffer_Release(&pickled);
    return result;
}

static PyMethodDef methods[] = {
    {"recv_small", recv_small, METH_VARARGS,
     "Receives until a small frame is complete; see frames.Reader."},
    {"send_small", send_small, METH_VARARGS,
     "Sends a small frame's header and pickle with one sendmsg; returns bytes sent."},
    {"take_replies", take_replies, METH_VARARGS,
     "Receives and takes the small replies already received, popped from a pending dict "
     "(completing their futures when it can)."},
    {"future_maker", future_maker, METH_VARARGS,
     "A maker of one connection's futures, filling their slots in C (see _future.c)."},
    {"peer_gone", peer_gone, METH_VARARGS,
     "Whether an idle stream socket's peer closed it (one non-blocking peek)."},
    {"answer_small", answer_small, METH_VARARGS,
     "Sends a small frame and reads the next, one GIL release for the send and a receive."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_cframes",
    "The courier's compiled frame loop (see frames.py); absent, the pure-Python one runs.",
    -1, methods, NULL, NULL, NULL, NULL,
};

/* Bumped whenever a function's arguments or results change: frame_loop.py refuses a build
 * of other sources (a stale _cframes*.so left beside newer Python) and runs the pure loop. */
#define API_VERSION 4

PyMODINIT_FUNC PyInit__cframes(void) {
    if (settle_init() < 0 || future_init() < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "API_VERSION", API_VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
