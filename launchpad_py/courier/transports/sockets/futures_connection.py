"""One client connection carrying many calls at once: the caller who waits reads the replies.

A future's reply used to be read by a reader thread that then woke the
waiting caller: two threads taking turns on one GIL for every call. Here the
thread that waits for a future (``result()``, ``exception()``) takes the
connection's reading role if nobody holds it, reads replies (completing
whichever futures they belong to, in any order) until its own is done, then
hands the role to another waiting caller. A caller that finds the role taken
waits for its future as usual, and is offered the role when the reader leaves.

A background thread reads when nobody waits that way: at once for futures
observed otherwise (``add_done_callback``, ``concurrent.futures.wait`` and
``as_completed``, ``done()``), and after ``IDLE_READ`` seconds without
progress for futures nobody looks at, so the server's replies never pile up.
It sleeps while no call is pending.

The pending table (call id -> future) is a plain dict read without a lock: an
entry is added before its request leaves and popped by whoever completes it
(the reader matching its reply, its deadline, or the connection failing), and
a dict's ``pop`` is atomic, so each future is completed by one taker. With the
compiled frame loop the reader matches every small reply already received in
one call (``frames.Reader.take_replies``), and completes itself the futures that
only their reader waits for (``_settle.c``): such a reply then runs no Python code.
"""

from __future__ import annotations

import functools
import itertools
import select
import ssl
import threading
import time
from typing import Callable

from launchpad_py.courier import errors, frames, serialization
from launchpad_py.courier.transports.sockets import call_future, socket_serving
from launchpad_py.courier.transports.sockets.deadlines import deadlines

IDLE_READ = 0.01


class FuturesConnection:
    """Calls matched to futures by call id on one connection."""

    def __init__(self, connection: frames.Connection, address: str):
        self._connection = connection
        self._address = address
        self._ids = itertools.count(1)
        #: Calls sent and not completed: call id -> (future, method, decode).
        self.pending: dict[int, tuple[call_future.CallFuture, str, Callable]] = {}
        self._lock = threading.Lock()  # The reading role and the callers waiting for it.
        self._reader: int | None = None  # The thread holding the reading role.
        # Futures whose callers wait, not reading: one of them is offered the role next.
        self._idle: dict[call_future.CallFuture, None] = {}
        self._watched: set[int] = set()  # Calls to deliver without anyone waiting in result().
        self._progress = 0  # Frames read; the background thread checks it moves.
        self.closed = False
        self._timed = False  # Whether any call here ever had a deadline.
        self._wake = threading.Condition(threading.Lock())
        self.condition = threading.Condition()  # Shared by this connection's futures.
        # ``CallFuture(self, call_id, deadline, on_failure)``; the compiled loop's maker fills
        # the future's slots in one C call, without a Python ``__init__``.
        loop = connection.reader.loop
        self._new_future = functools.partial(call_future.CallFuture, self) if loop is None \
            else loop.future_maker(call_future.CallFuture, call_future.Watched,
                                   call_future.FIELDS, self, self.condition, call_future.PENDING)
        # What the compiled loop needs to complete a future as ``CallFuture.deliver`` would
        # (``_settle.c``): entries decoded with ``decode_reply`` qualify; the lock and the
        # sleepers are the condition's, which every future here shares; the maker says where
        # the fields of the futures it made lie.
        self._settle = (serialization.decode_reply, serialization, serialization.plain_loads,
                        self._watched, self.condition._lock, self.condition._waiters,
                        call_future.PENDING, call_future.FINISHED,
                        None if loop is None else self._new_future)
        self._asleep = False
        self._thread = threading.Thread(target=self._background, daemon=True,
                                        name=f'uds-channel-{address}')
        self._thread.start()

    # -- calls --------------------------------------------------------------------------

    def submit(self, request: tuple, timeout: float | None, decode: Callable,
               on_failure: Callable | None = None) -> call_future.CallFuture | None:
        """The call's future; None when the connection turned out broken before the request
        went out (its server went away, and may be back): then nothing was sent, the
        connection is closed, and the caller may send the request on a new one.
        ``on_failure``: the future's failure hook (``CallFuture.on_failure``)."""
        call_id = next(self._ids)
        future = self._new_future(call_id, None if not timeout else time.monotonic() + timeout,
                                  on_failure)
        pending = self.pending
        pending[call_id] = (future, request[0], decode)
        if self.closed:  # Shut before or while it was added: whoever pops it fails it.
            if pending.pop(call_id, None) is not None:
                future.set_exception(self._unavailable(request[0], 'connection closed'))
            return future
        if timeout:  # Registered first, so a fast reply always finds it to discard.
            self._timed = True
            deadlines.add(future._deadline, self, call_id)
        if self._asleep:
            self._nudge()
        try:
            self._connection.send(call_id, socket_serving.FUTURE_REQUEST, request)
        except OSError as exc:
            if pending.pop(call_id, None) is None:
                return future  # Failed meanwhile (the connection shut): its error stands.
            if timeout:
                deadlines.discard(self, call_id)
            self._shut(exc)  # Nobody else may be reading to notice the server is gone.
            return None
        return future

    def stale(self) -> bool:
        """Whether this idle connection was closed by its server (see ``peer_gone``)."""
        return not self.pending and self._reader is None and self._connection.peer_gone()

    def _unavailable(self, method: str, why) -> errors.CourierError:
        return errors.CourierUnavailableError(
            f'server unavailable calling {method!r} on {self._address}: {why}')

    def expire(self, call_id: int) -> None:
        """Fails the call with a timeout, unless it was completed first."""
        entry = self.pending.pop(call_id, None)
        if entry is not None:
            self._watched.discard(call_id)
            call_future.settle(entry[0], errors.CourierTimeoutError(
                f'timed out calling {entry[1]!r} on {self._address}'), failed=True)
            if self._timed:
                deadlines.discard(self, call_id)

    # -- waiting and reading ------------------------------------------------------------

    def wait_for(self, future: call_future.CallFuture, timeout: float | None) -> None:
        """Returns once ``future`` is done or ``timeout`` passed, reading replies meanwhile."""
        me = threading.get_ident()
        if self._reader is None:  # Nobody reads (the usual case): take the role directly.
            with self._lock:
                reading = (self._reader is None and not self.closed
                           and future._state == call_future.PENDING)
                if reading:
                    self._reader = me
            if reading:
                try:
                    self._read_until(
                        future, None if timeout is None else time.monotonic() + timeout)
                finally:
                    self._leave()
                return
        until = None if timeout is None else time.monotonic() + timeout
        while future._state == call_future.PENDING:
            if self._reader == me:  # From a done-callback this thread runs while reading.
                self._read_until(future, until)
                return
            condition = future._condition
            with condition:
                with self._lock:
                    if future._state != call_future.PENDING:
                        return
                    reading = self._reader is None and not self.closed
                    if reading:
                        self._reader = me
                    else:
                        self._idle[future] = None
                if not reading:
                    waited = condition.wait(None if until is None else until - time.monotonic())
                    with self._lock:
                        self._idle.pop(future, None)
                    if not waited and until is not None and time.monotonic() >= until:
                        return
                    continue
            try:
                self._read_until(future, until)
            finally:
                self._leave()
            return

    def _read_until(self, future: call_future.CallFuture, until: float | None) -> None:
        """Reads replies until ``future`` is done, ``until`` or its call's deadline passes
        (each read takes every reply already received: waiting for those next costs nothing)."""
        while future._state == call_future.PENDING:
            ends = future._deadline if until is None else min(until, future._deadline or until)
            if ends is not None and not self._readable(ends - time.monotonic()):
                if future._deadline is not None and time.monotonic() >= future._deadline:
                    self.expire(future._call_id)
                if until is not None and time.monotonic() >= until:
                    return
                continue
            self._read_some()

    def _readable(self, seconds: float) -> bool:
        """Whether reading can start without waiting past ``seconds`` (a frame begun is read
        to its end: its sender is writing the rest)."""
        if self._connection.reader.buffered:
            return True
        sock = self._connection.sock
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return True
        poller = select.poll()
        try:
            poller.register(sock, select.POLLIN)
            return bool(poller.poll(max(0, int(seconds * 1000) + 1)))
        except (OSError, ValueError):
            return True  # Closed: the read says so.

    def _read_some(self) -> None:
        """Reads the replies received (at least one frame) and completes their futures; on a
        broken connection fails them all."""
        try:  # Calls with deadlines have theirs discarded below, so they are completed here.
            replies = self._connection.reader.take_replies(
                self.pending, None if self._timed else self._settle)
        except (EOFError, OSError) as exc:
            self._shut(exc)
            return
        self._progress += 1
        self._complete(replies)

    def _complete(self, replies: list) -> None:
        """Completes the futures of ``replies`` (``take_replies``'s).

        ``decode_reply`` and ``CallFuture.deliver`` run inline in their common case: a reply
        decoded with ``decode_reply`` whose future only its reader waits for (no waiter of
        ``wait``/``as_completed``, no done-callback, nobody asleep on the condition) is two
        stores under the condition's lock, as ``_settle.c`` makes them in the compiled loop:
        the pure loop's reply then costs no Python call of its own. Any other goes the long way.
        """
        timed, watched = self._timed, self._watched
        plain, loads = serialization.decode_reply, serialization.plain_loads
        condition = self.condition
        lock, sleepers = condition._lock, condition._waiters
        for (future, _, decode), pickled, buffers in replies:
            if timed:
                deadlines.discard(self, future._call_id)
            if watched:
                watched.discard(future._call_id)
            try:
                if buffers is None:  # The compiled loop unpickled it (and left it to us).
                    value = serialization.reply_value(pickled)
                elif decode is not plain or serialization.device_decodes:
                    value = decode(pickled, buffers)
                else:  # ``decode_reply``'s common case.
                    status, value = loads(pickled, buffers=buffers)
                    if status != 'ok':
                        value = serialization.reply_value((status, value))  # Raises it.
            except BaseException as exc:  # The remote exception, rebuilt.
                call_future.settle(future, exc, failed=True)
                continue
            with lock:  # ``deliver``'s quiet case; the lock orders it against ``cancel``.
                if (future._state == call_future.PENDING and not future._waiters
                        and not future._done_callbacks and not sleepers):
                    future._result = value
                    future._state = call_future.FINISHED
                    continue
            future.deliver(value)

    def _leave(self) -> None:
        """Gives up the reading role, offering it to a caller still waiting, else the thread."""
        with self._lock:
            self._reader = None
            offer = next((f for f in self._idle if f._state == call_future.PENDING), None) \
                if self._idle else None
            background = offer is None and bool(self._watched) and not self.closed
        if offer is not None:
            with self.condition:
                self.condition.notify_all()
        elif background:
            self._nudge()

    def watched(self, future: call_future.CallFuture) -> None:
        """``future`` is observed without anyone reading for it: the thread delivers it."""
        call_id = future._call_id
        if call_id not in self._watched:
            self._watched.add(call_id)
            if call_id not in self.pending:  # Delivered (or failed) meanwhile.
                self._watched.discard(call_id)
            elif self._reader is None:
                self._nudge()

    # -- the background reader ----------------------------------------------------------

    def _nudge(self) -> None:
        with self._wake:
            self._wake.notify()

    def _background(self) -> None:
        while self._await_work():
            me = threading.get_ident()
            with self._lock:
                if self._reader is not None or not self.pending:
                    continue
                self._reader = me
            try:  # Until a caller wants to read, or nothing is left to read for.
                while self.pending and not self._idle and not self.closed:
                    self._read_some()
            finally:
                self._leave()
        self._connection.close()

    def _await_work(self) -> bool:
        """Waits until the thread should read; False once the connection is closed.

        It should when a pending call is watched, or when calls are pending and
        nobody read anything for ``IDLE_READ`` seconds.
        """
        seen = None
        with self._wake:
            while not self.closed:
                # Not while a caller waits in result(): it is offered the role and reads (the
                # thread taking it back at once would spin against it for the GIL).
                if self._reader is None and self.pending and not self._idle and (
                        self._watched or self._progress == seen):
                    return True
                self._asleep = True  # Before looking: a call submitted now wakes us.
                if self.pending:
                    self._asleep = False
                    seen = self._progress
                    self._wake.wait(IDLE_READ)
                else:
                    seen = None
                    self._wake.wait()
                    self._asleep = False
        return False

    def _shut(self, reason: BaseException) -> None:
        self.closed = True  # First: a call added from now on is failed by its submitter.
        pending = self.pending
        self._watched.clear()
        while pending:
            try:
                _, (future, method, _) = pending.popitem()
            except KeyError:  # Taken meanwhile by its reader or its deadline.
                break
            call_future.settle(future, self._unavailable(method, reason), failed=True)
        if self._timed:
            deadlines.discard_all(self)
        self._nudge()

    def abandon(self) -> None:
        """Stops using a connection its server closed; its thread then closes it."""
        self._shut(ConnectionError('the server closed the connection'))

    def close(self) -> None:
        try:
            self._connection.sock.shutdown(2)
        except OSError:
            pass
        self._shut(ConnectionError('the client closed the connection'))
        self._thread.join(timeout=10)
