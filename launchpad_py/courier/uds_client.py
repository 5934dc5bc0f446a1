"""The client side of the same-host path (see ``uds.py``), also used by raw TCP (``tcp.py``).

Synchronous calls borrow an idle connection, write the request and read the
reply in the calling thread (no hand-off). Futures share one connection per
server, with a reader thread that completes them in any order. ``None``
from ``call``/``call_future`` means "no local server here": use gRPC.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import threading
import time
from typing import Any, Callable

from launchpad_py.courier import errors, uds, uds_server

_NOT_LOCAL = object()


class LocalChannel:
    """All connections of this process to one server by one path (Unix socket or raw TCP).

    ``connect(timeout)`` opens a connection, returns None when the path is
    not there (use gRPC), or raises a courier error.
    """

    def __init__(self, address: str, connect: Callable[[float | None], uds.Connection | None]):
        self.address = address
        self._connect = connect
        self._idle: list[uds.Connection] = []
        self._lock = threading.Lock()
        self._mux: _FuturesConnection | None = None

    # -- synchronous ------------------------------------------------------------------

    def call(self, request: tuple, timeout: float | None, decode: Callable) -> Any:
        """The reply's value, or ``NOT_LOCAL`` when the server has no local socket."""
        for attempt in range(2):
            connection = self._borrow(timeout)
            if connection is None:
                return _NOT_LOCAL
            try:
                connection.send(0, uds_server.SYNC_REQUEST, request)
            except OSError:  # A pooled connection whose server went away: not sent, retry.
                connection.close()
                continue
            return self._await_reply(connection, request[0], timeout, decode)
        return _NOT_LOCAL

    def _await_reply(self, connection: uds.Connection, method: str, timeout: float | None,
                     decode: Callable) -> Any:
        try:
            if timeout:
                connection.sock.settimeout(timeout)
            frame = connection.read()
            if timeout:
                connection.sock.settimeout(None)
        except TimeoutError:
            connection.close()
            raise errors.CourierTimeoutError(
                f'timed out calling {method!r} on {self.address}') from None
        except (EOFError, OSError) as exc:
            connection.close()
            raise errors.CourierUnavailableError(
                f'server unavailable calling {method!r} on {self.address}: {exc}') from None
        with self._lock:
            self._idle.append(connection)
        return decode(frame)

    def _borrow(self, timeout: float | None) -> uds.Connection | None:
        while True:
            with self._lock:
                if not self._idle:
                    break
                connection = self._idle.pop()
            if not connection.peer_gone():
                return connection
            connection.close()  # Its server went away (and may be back): take a new one.
        return self._connect(timeout)

    # -- futures ----------------------------------------------------------------------

    def call_future(self, request: tuple, timeout: float | None,
                    decode: Callable) -> concurrent.futures.Future | object:
        with self._lock:
            mux = self._mux
            if mux is None or mux.closed:
                connection = self._connect(timeout)
                if connection is None:
                    return _NOT_LOCAL
                mux = self._mux = _FuturesConnection(connection, self.address)
        return mux.submit(request, timeout, decode)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
            mux, self._mux = self._mux, None
        for connection in idle:
            connection.close()
        if mux is not None:
            mux.close()


NOT_LOCAL = _NOT_LOCAL


class _FuturesConnection:
    """One connection carrying many calls at once, matched to futures by call id.

    Its reader thread lives as long as the cached connection, like a gRPC
    channel's threads, and ends when the server closes it.
    """

    def __init__(self, connection: uds.Connection, address: str):
        self._connection = connection
        self._address = address
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[concurrent.futures.Future, str, Callable]] = {}
        self._lock = threading.Lock()
        self.closed = False
        self._timed = False  # Whether any call here ever had a deadline.
        self._thread = threading.Thread(target=self._read_replies, daemon=True,
                                        name=f'uds-channel-{address}')
        self._thread.start()

    def submit(self, request: tuple, timeout: float | None,
               decode: Callable) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        call_id = next(self._ids)
        with self._lock:
            if self.closed:
                future.set_exception(self._unavailable(request[0], 'connection closed'))
                return future
            self._pending[call_id] = (future, request[0], decode)
        if timeout:  # Registered first, so a fast reply always finds it to discard.
            self._timed = True
            _deadlines.add(time.monotonic() + timeout, self, call_id)
        try:
            self._connection.send(call_id, uds_server.FUTURE_REQUEST, request)
        except OSError as exc:
            self._fail(call_id, self._unavailable(request[0], exc))
        return future

    def _unavailable(self, method: str, why) -> errors.CourierError:
        return errors.CourierUnavailableError(
            f'server unavailable calling {method!r} on {self._address}: {why}')

    def _fail(self, call_id: int, exc: BaseException) -> None:
        with self._lock:
            entry = self._pending.pop(call_id, None)
        if entry is not None:
            entry[0].set_exception(exc)
            if self._timed:
                _deadlines.discard(self, call_id)

    def expire(self, call_id: int) -> None:
        with self._lock:
            entry = self._pending.get(call_id)
        if entry is not None:
            self._fail(call_id, errors.CourierTimeoutError(
                f'timed out calling {entry[1]!r} on {self._address}'))

    def _read_replies(self) -> None:
        try:
            while True:
                frame = self._connection.read()
                with self._lock:
                    entry = self._pending.pop(frame.call_id, None)
                if entry is None:
                    continue  # Timed out already.
                future, _, decode = entry
                if self._timed:
                    _deadlines.discard(self, frame.call_id)
                try:
                    future.set_result(decode(frame))
                except BaseException as exc:  # The remote exception, rebuilt.
                    future.set_exception(exc)
        except (EOFError, OSError) as exc:
            reason = exc
        with self._lock:
            self.closed = True
            pending, self._pending = self._pending, {}
        for future, method, _ in pending.values():
            future.set_exception(self._unavailable(method, reason))
        if self._timed:
            _deadlines.discard_all(self)
        self._connection.close()

    def close(self) -> None:
        try:
            self._connection.sock.shutdown(2)
        except OSError:
            pass
        self._thread.join(timeout=10)


class _Deadlines:
    """Times out futures; its thread runs only while some deadline is pending."""

    def __init__(self):
        self._entries: dict[tuple[int, int], tuple[float, _FuturesConnection, int]] = {}
        self._cond = threading.Condition()
        self._running = False

    def add(self, deadline: float, owner: _FuturesConnection, call_id: int) -> None:
        with self._cond:
            self._entries[(id(owner), call_id)] = (deadline, owner, call_id)
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, name='courier-deadlines', daemon=True).start()
            self._cond.notify()

    def discard(self, owner: _FuturesConnection, call_id: int) -> None:
        with self._cond:
            if self._entries.pop((id(owner), call_id), None) is not None:
                self._cond.notify()

    def discard_all(self, owner: _FuturesConnection) -> None:
        with self._cond:
            for key in [k for k in self._entries if k[0] == id(owner)]:
                del self._entries[key]
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                due = [k for k, (d, _, _) in self._entries.items() if d <= now]
                expired = [self._entries.pop(k) for k in due]
                if not self._entries and not expired:
                    self._running = False
                    return
                if not expired:
                    self._cond.wait(min(d for d, _, _ in self._entries.values()) - now)
            for _, owner, call_id in expired:
                owner.expire(call_id)


_deadlines = _Deadlines()
