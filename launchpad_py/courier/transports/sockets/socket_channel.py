"""The client side of both socket paths: the Unix socket (``uds.py``) and raw TCP (``tcp.py``).

A ``SocketChannel`` does not know which of the two it holds: it is given how to open a
connection (``uds.connect`` or, through the server's TCP port, ``tcp.connect``).

Synchronous calls borrow an idle connection, write the request and read the
reply in the calling thread (no hand-off). Futures share one connection per
server, whose replies the callers waiting for them read (see
``futures_connection.py``). ``NO_SOCKET`` from ``call``/``call_future`` means the server
offers no such socket here: use gRPC.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any, Callable

from launchpad_py.courier import errors, frames
from launchpad_py.courier.transports.sockets import futures_connection, socket_serving

_NO_SOCKET = object()


class SocketChannel:
    """All connections of this process to one server by one path (Unix socket or raw TCP).

    ``connect(timeout)`` opens a connection, returns None when the path is
    not there (use gRPC), or raises a courier error.
    """

    def __init__(self, address: str,
                 connect: Callable[[float | None], frames.Connection | None]):
        self.address = address
        self._connect = connect
        self._idle: list[frames.Connection] = []
        self._lock = threading.Lock()
        self._mux: futures_connection.FuturesConnection | None = None

    # -- synchronous ------------------------------------------------------------------

    def call(self, request: tuple, timeout: float | None, decode: Callable) -> Any:
        """The reply's value, or ``NO_SOCKET`` when the server offers no such socket here."""
        idle = self._idle
        for attempt in range(2):
            try:  # Borrowed with list.pop, returned with list.append: atomic, no lock per call.
                connection = idle.pop()
            except IndexError:
                connection = self._connect(timeout)
                if connection is None:
                    return _NO_SOCKET
            else:
                if connection.may_go_unseen and connection.peer_gone():
                    connection.close()  # Its server went away (and may be back): a new one.
                    connection = self._connect(timeout)
                    if connection is None:
                        return _NO_SOCKET
            try:
                connection.send(0, socket_serving.SYNC_REQUEST, request)
            except OSError:  # A pooled connection whose server went away: not sent, retry.
                connection.close()
                continue
            try:
                if timeout:
                    connection.sock.settimeout(timeout)
                frame = connection.read()
                if timeout:
                    connection.sock.settimeout(None)
            except TimeoutError:
                connection.close()
                raise errors.CourierTimeoutError(
                    f'timed out calling {request[0]!r} on {self.address}') from None
            except (EOFError, OSError) as exc:
                connection.close()
                raise errors.CourierUnavailableError(
                    f'server unavailable calling {request[0]!r} on {self.address}: {exc}'
                ) from None
            idle.append(connection)
            return decode(frame.pickled, frame.buffers)
        return _NO_SOCKET

    # -- futures ----------------------------------------------------------------------

    def call_future(self, request: tuple, timeout: float | None, decode: Callable,
                    on_failure: Callable | None = None) -> concurrent.futures.Future | object:
        """The call's future, or ``NO_SOCKET`` when the server offers no such socket here;
        ``on_failure(future)`` runs if the call fails (``CallFuture.on_failure``)."""
        mux = self._mux
        if mux is not None and mux.pending and not mux.closed:  # In use: no staleness to ask.
            future = mux.submit(request, timeout, decode, on_failure)
            if future is not None:
                return future
        for attempt in range(2):  # A connection its server closed is noticed, then replaced.
            mux = self._mux
            if mux is None or mux.closed or (not mux.pending and mux.stale()):
                mux = self._futures_connection(timeout)
                if mux is None:
                    return _NO_SOCKET
            future = mux.submit(request, timeout, decode, on_failure)
            if future is not None:
                return future
        return _NO_SOCKET

    def _futures_connection(self, timeout: float | None
                            ) -> futures_connection.FuturesConnection | None:
        mux = self._mux
        if mux is not None and not mux.closed and not mux.stale():
            return mux
        with self._lock:
            mux = self._mux
            if mux is None or mux.closed or mux.stale():
                if mux is not None:
                    mux.abandon()
                connection = self._connect(timeout)
                if connection is None:
                    return None
                mux = self._mux = futures_connection.FuturesConnection(connection, self.address)
            return mux

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
            mux, self._mux = self._mux, None
        for connection in idle:
            connection.close()
        if mux is not None:
            mux.close()


NO_SOCKET = _NO_SOCKET


class ChannelCache:
    """A transport's channels of this process, one per key, shared by the clients that
    dial the same key; those to a stopped server are closed (``close_server``), since a
    channel's reader sleeps while no call is pending and would never see its server go.

    ``server_of(key)`` names the server a key dials (None: none to close it for). Keys are
    kept by it, so that a server's stop finds its channels at once: a process holding
    channels to 2,000 local_mt nodes looked through all of them at each of their stops
    (4 million checks, past the launch's grace; bench.issue25, stop 44)."""

    def __init__(self, server_of: Callable[[Any], Any]):
        self._channels: dict[Any, SocketChannel] = {}
        self._keys_of: dict[Any, list] = {}  # Server -> the keys that dial it.
        self._server_of = server_of
        self._lock = threading.Lock()

    def get(self, key, address: str, connect: Callable[[], Callable]) -> SocketChannel:
        """The channel of ``key``, made for ``address`` with ``connect()``'s connector once."""
        with self._lock:
            channel = self._channels.get(key)
            if channel is None:
                channel = self._channels[key] = SocketChannel(address, connect())
                server = self._server_of(key)
                if server is not None:
                    self._keys_of.setdefault(server, []).append(key)
            return channel

    def close_server(self, server) -> None:
        """Closes and forgets every channel to ``server`` (as ``server_of`` names it), which
        stopped."""
        with self._lock:
            channels = [self._channels.pop(key) for key in self._keys_of.pop(server, ())]
        for channel in channels:
            channel.close()
