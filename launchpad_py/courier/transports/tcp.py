"""The raw-TCP path between hosts: the Unix-socket frames, over an authenticated TCP socket.

A server's address names its gRPC port; its raw-TCP listener sits on a port
of its own on the same interface, which a client learns once per address
with the gRPC ``Endpoints`` call (whose answer the server signs, see
``auth.py``) and keeps.
Each TCP connection starts with the handshake of ``tcp_handshakes.py``; after it, the
frames are those of ``frames.py`` with every buffer in band: written with
``sendmsg`` scatter/gather, read with ``recv_into`` into memory allocated
for them, and bounded by ``max_frame_bytes`` before anything is allocated.
"""

from __future__ import annotations

import functools
import logging
import select
import socket
import ssl
import struct
from typing import Callable

from launchpad_py.courier import auth, errors, frames, serialization
from launchpad_py.courier.transports import grpc_chunks, interface, tcp_handshakes, uds
from launchpad_py.courier.transports.sockets import socket_channel, socket_serving

_log = logging.getLogger('launchpad_py.courier')
ENDPOINTS = struct.Struct('<H')  # The gRPC Endpoints reply: the raw-TCP port, 0 for none.
# The largest frame a TCP peer may announce (a bound on memory, not a goal).
MAX_FRAME_BYTES = 16 << 30
HANDSHAKE_SECONDS = 10.0
# Connections still in their handshake; beyond this the oldest is dropped.
MAX_PENDING = 1024
# Connections the kernel holds until the door accepts them: room for every client of a
# 2,000-node program dialling at once (the kernel caps it at net.core.somaxconn, 4,096 on
# the Linux of these hosts; a full queue drops SYNs, and the client retries a second later).
BACKLOG = 4096


def _tune(sock: socket.socket) -> None:
    uds.tune(sock)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class Connection:
    """One authenticated TCP (or TLS) connection: framed sends under a lock, a reader.

    A ``frames.Connection`` like ``uds.Connection``, not one of its kind: no shared memory,
    no segments to release, and an idle peer's close is seen ahead (``peer_gone``)."""

    def __init__(self, sock: socket.socket, max_frame_bytes: int | None = None):
        self.sock = sock
        self.reader = frames.Reader(sock, None, descriptors=False,
                                    max_frame_bytes=max_frame_bytes)
        self.outbox = frames.Outbox(sock, self.reader.loop)
        self.read = self.reader.read  # Nothing to add to it here (see uds.Connection.read).
        if self.reader.loop is not None:  # The compiled peek, called directly (see close).
            self.peer_gone = functools.partial(self.reader.loop.peer_gone, sock.fileno())
        elif not isinstance(sock, ssl.SSLSocket):  # The pure loop's look, as directly.
            self.peer_gone = _poll_now(sock)

    def send(self, call_id: int, kind: int, obj, counts=None, hold: bool = False) -> None:
        pickled, buffers = serialization.encode(obj)
        if not buffers:  # The small call: one write.
            self.outbox.small(call_id, kind, pickled, counts, hold)
            return
        parts, _ = frames.encode_parts(call_id, kind, pickled, buffers)
        self.outbox.frame(parts, None, counts)

    def flush(self) -> None:
        self.outbox.flush()

    #: A request written to a TCP connection its server closed is accepted by the kernel:
    #: a pooled connection is asked ``peer_gone`` before it is used.
    may_go_unseen = True

    def peer_gone(self) -> bool:
        """Whether an idle connection was closed by its server (e.g. it restarted since).

        Over TCP a request written to such a connection is accepted by the kernel
        and fails only when the reply is read, as if the server had died during
        the call; this check lets the caller take a fresh connection instead. It is asked
        before every pooled synchronous call, so a plain connection has this method
        replaced by one C call bound to its descriptor: the compiled loop's peek, which
        does not raise, or on the pure loop a ``poll`` that does not wait (``_poll_now``;
        its answer is a list, true when gone). This body serves TLS.
        """
        return _tls_peer_gone(self.sock)

    def close(self) -> None:
        # The bound peek would look at whatever socket reuses the descriptor: gone instead.
        self.peer_gone = _gone
        uds.shut(self.sock)


def _gone() -> bool:
    """``peer_gone`` of a connection closed here."""
    return True


def _poll_now(sock: socket.socket) -> Callable[[], list]:
    """``peer_gone`` of a plain socket on the pure loop: a ``poll`` that does not wait, whose
    answer is true (a non-empty list) when the peer closed, reset, or sent what no server
    sends to an idle connection, as a peek would say. A peek raises ``BlockingIOError`` for
    the usual answer, which cost a pure caller over TCP more than the rest of its check,
    on every pooled synchronous call."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return functools.partial(poller.poll, 0)


def _tls_peer_gone(sock: ssl.SSLSocket) -> bool:
    """``peer_gone`` over TLS, where peeking at the kernel's bytes says nothing: an idle TLS
    connection may hold records its server sent unasked (TLS 1.3 session tickets). A
    non-blocking read takes those in and finds no data (want-read); the server's close
    reads as the end; data, which no server sends to an idle connection, makes the
    connection unusable too."""
    if not sock.pending() and not select.select([sock], [], [], 0)[0]:
        return False
    timeout = sock.gettimeout()
    sock.setblocking(False)
    try:
        sock.recv(1)
        return True
    except ssl.SSLWantReadError:
        return False
    except OSError:  # SSLError (a close without close_notify) included.
        return True
    finally:
        sock.settimeout(timeout)


def connect(host: str, port: int, secret: bytes | None, address: str,
            timeout: float | None, tls: ssl.SSLContext | None = None,
            expected: str | None = None) -> Connection:
    """An authenticated connection to ``host:port``, whose server must be named ``expected``
    (any name when None); raises a courier error."""
    limit = timeout or HANDSHAKE_SECONDS
    try:
        sock = socket.create_connection((host, port), timeout=limit)
    except OSError as exc:
        raise errors.CourierUnavailableError(
            f'cannot connect to the raw-TCP port {port} of {address}: {exc}') from None
    try:
        _tune(sock)
        if tls is not None:
            sock = tls.wrap_socket(sock, server_hostname=None if not tls.check_hostname else host)
        tcp_handshakes.client_handshake(sock, secret, address, limit, expected)
    except errors.CourierError:
        sock.close()
        raise
    except ssl.SSLError as exc:
        sock.close()
        raise errors.AuthenticationError(f'TLS with {address} failed: {exc}') from None
    except OSError as exc:
        sock.close()
        raise errors.CourierUnavailableError(f'handshake with {address} failed: {exc}') from None
    except BaseException:
        sock.close()
        raise
    return Connection(sock)


class TcpListener(socket_serving.SocketServing):
    """Accepts TCP connections for one server: the gate's handshake, then the shared serving."""

    def __init__(self, host: str, identity: auth.Identity, dispatch: Callable, unsendable: Callable,
                 executor, label: str | None, thread_initializer=None, *,
                 tls: ssl.SSLContext | None = None,
                 handshake_timeout: float = HANDSHAKE_SECONDS,
                 max_frame_bytes: int = MAX_FRAME_BYTES,
                 stats=None):
        super().__init__(f'courier-{label or "server"}-tcp', dispatch, unsendable, executor,
                         thread_initializer, stats=stats)
        self._host = host
        self._identity = identity
        self._tls = tls
        self._handshake_timeout = handshake_timeout
        self._max_frame_bytes = max_frame_bytes
        self._gate: tcp_handshakes.Gate | None = None
        self.port: int | None = None

    def bind(self) -> bool:
        """Binds a port of its own on the server's interface; False when it cannot."""
        family = socket.AF_INET6 if ':' in self._host.strip('[]') else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            listener.bind((self._host.strip('[]'), 0))
            listener.listen(BACKLOG)
        except OSError:
            listener.close()
            return False
        self._listener = listener
        self.port = listener.getsockname()[1]
        return True

    def start(self) -> None:
        self._gate = tcp_handshakes.Gate(self._listener, self._identity, self._name, self._admit,
                                         self._tls, self._handshake_timeout, MAX_PENDING)
        self._accept_from_first_connection(self._gate.run)

    def _admit(self, sock: socket.socket, peer) -> None:
        _tune(sock)
        self._admit_connection(Connection(sock, self._max_frame_bytes), peer)

    def _farewell(self, turn, ended: BaseException) -> None:
        """Logs a connection that ended in a way no honest peer ends one."""
        why = None
        if isinstance(ended, EOFError):
            if turn.connection.reader.truncated:
                why = 'the peer left in the middle of a frame'
        elif isinstance(ended, (frames.FrameError, struct.error, ValueError)):
            why = f'bad frame: {ended}'
        if why is not None and not self._closed:  # Logged before the close the peer sees.
            _log.warning('courier server %s: closed a TCP connection from %s: %s',
                         self._name, tcp_handshakes.peer_text(turn.peer), why)

    def stop(self, grace: float | None = None) -> None:
        if self._gate is not None:
            self._gate.close()
        super().stop(grace)


def listen(serving: interface.Serving) -> TcpListener | None:
    """The raw-TCP listener of a server, unless turned off or no port can be bound."""
    if not serving.options.tcp_transport:
        return None
    tls = serving.options.tls
    listener = TcpListener(
        serving.host, serving.identity, serving.dispatch, serving.unsendable, serving.pool,
        serving.label, serving.initializer, handshake_timeout=serving.options.handshake_timeout,
        max_frame_bytes=serving.options.max_frame_bytes,
        tls=None if tls is None else tls.server_context(), stats=serving.stats)
    return listener if listener.bind() else None


# By address, secret, TLS and expected name; closed by address.
_channels = socket_channel.ChannelCache(server_of=lambda key: key[0])


def forget(host: str, port: int) -> None:
    """Closes the cached channels to the stopped server whose address is ``host:port``."""
    _channels.close_server(f'{host}:{port}')


def dial(dial: interface.Dial) -> socket_channel.SocketChannel:
    """The channel of this process to the server at ``dial.address`` over raw TCP, one per
    address, secret, TLS and expected name (shared by the clients that agree on those)."""
    return _channels.get((dial.address, dial.secret, dial.tls, dial.expected), dial.address,
                         lambda: _TcpPort(dial).connect)


class _TcpPort:
    """Finds a server's raw-TCP port (one gRPC call, kept) and connects to it."""

    def __init__(self, dial: interface.Dial):
        self._address = dial.address
        self._expected = dial.expected
        self._host = dial.address.rpartition(':')[0].strip('[]')
        self._secret = dial.secret
        self._tls = None if dial.tls is None else dial.tls.client_context()
        from launchpad_py.courier.transports import grpc_client  # noqa: PLC0415 (registry.py)
        self._grpc = grpc_client.GrpcCaller(dial.address, dial.timeout, dial.wait_for_ready,
                                            grpc_chunks.MAX_MESSAGE_BYTES, dial.secret, dial.tls,
                                            dial.expected)
        self._port: int | None = None

    def connect(self, timeout: float | None) -> Connection | None:
        """A new connection; None when the server has no raw-TCP listener (use gRPC)."""
        fresh = self._port is None
        if fresh:
            self._port = self._grpc.tcp_port()
        if not self._port:
            return None
        try:
            return connect(self._host, self._port, self._secret, self._address, timeout,
                           self._tls, self._expected)
        except errors.CourierUnavailableError:
            if fresh:
                raise
        self._port = self._grpc.tcp_port()  # The cached port may be a restarted server's.
        if not self._port:
            return None
        return connect(self._host, self._port, self._secret, self._address, timeout,
                       self._tls, self._expected)
