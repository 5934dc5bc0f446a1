"""The raw-TCP path between hosts: the Unix-socket frames, over an authenticated TCP socket.

A server's address names its gRPC port; its raw-TCP listener sits on a port
of its own on the same interface, which a client learns once per address
with the gRPC ``Endpoints`` call (whose answer the server signs, see
``auth.py``) and keeps.
Each TCP connection starts with the handshake of ``auth.py``; after it, the
frames are those of ``frames.py`` with every buffer in band: written with
``sendmsg`` scatter/gather, read with ``recv_into`` into memory allocated
for them, and bounded by ``max_frame_bytes`` before anything is allocated.
"""

from __future__ import annotations

import logging
import socket
import ssl
import struct
import threading
from typing import Callable

from launchpad_py.courier import auth, errors, frames, tcp_gate, uds, uds_server

_log = logging.getLogger('launchpad_py.courier')
ENDPOINTS = struct.Struct('<H')  # The gRPC Endpoints reply: the raw-TCP port, 0 for none.
# The largest frame a TCP peer may announce (a bound on memory, not a goal).
MAX_FRAME_BYTES = 16 << 30
HANDSHAKE_SECONDS = 10.0
# Connections still in their handshake; beyond this the oldest is dropped.
MAX_PENDING = 1024


def _tune(sock: socket.socket) -> None:
    uds.tune(sock)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class Connection(uds.Connection):
    """One authenticated TCP (or TLS) connection: framed sends under a lock, a reader."""

    def __init__(self, sock: socket.socket, max_frame_bytes: int | None = None):
        self.sock = sock
        self.released = None
        self.pool = None
        self.reader = frames.Reader(sock, None, descriptors=False,
                                    max_frame_bytes=max_frame_bytes)
        self._send_lock = threading.Lock()

    def send(self, call_id: int, kind: int, obj, counts=None) -> None:
        parts, _ = frames.encode(call_id, kind, obj)
        if counts is not None:
            counts.bytes_out += len(parts[0]) if len(parts) == 1 else frames.encoded_size(parts)
        with self._send_lock:
            if len(parts) == 1:
                self.sock.sendall(parts[0])
            else:
                frames.send(self.sock, parts, None)

    def read(self) -> frames.Frame:
        return self.reader.read()

    def peer_gone(self) -> bool:
        """Whether an idle connection was closed by its server (e.g. it restarted since).

        Over TCP a request written to such a connection is accepted by the kernel
        and fails only when the reply is read, as if the server had died during
        the call; this check lets the caller take a fresh connection instead. TLS
        may hold records the peer sent unasked, so TLS connections are not checked.
        """
        if isinstance(self.sock, ssl.SSLSocket):
            return False
        try:
            return self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) is not None
        except BlockingIOError:
            return False
        except OSError:
            return True

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


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
        auth.client_handshake(sock, secret, address, limit, expected)
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


class TcpListener(uds_server.LocalListener):
    """Accepts TCP connections for one server: the gate's handshake, then the Unix-socket loop."""

    def __init__(self, host: str, identity: auth.Identity, dispatch: Callable, unsendable: Callable,
                 executor, label: str | None, thread_initializer=None, *,
                 tls: ssl.SSLContext | None = None,
                 handshake_timeout: float = HANDSHAKE_SECONDS,
                 max_frame_bytes: int = MAX_FRAME_BYTES,
                 stats=None):
        super().__init__(0, dispatch, unsendable, executor, label, thread_initializer,
                         stats=stats)
        self.path = None
        self._name = f'courier-{label or "server"}-tcp'
        self._watchdog.name = f'{self._name}-watchdog'
        self._host = host
        self._identity = identity
        self._tls = tls
        self._handshake_timeout = handshake_timeout
        self._max_frame_bytes = max_frame_bytes
        self._gate: tcp_gate.Gate | None = None
        self.port: int | None = None

    def start(self) -> bool:
        family = socket.AF_INET6 if ':' in self._host.strip('[]') else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            listener.bind((self._host.strip('[]'), 0))
            listener.listen(1024)
        except OSError:
            listener.close()
            return False
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._gate = tcp_gate.Gate(listener, self._identity, self._name, self._admit, self._tls,
                                   self._handshake_timeout, MAX_PENDING)
        self._spawn(self._gate.run)
        return True

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
                         self._name, tcp_gate.peer_text(turn.peer), why)

    def stop(self) -> None:
        if self._gate is not None:
            self._gate.close()
        super().stop()

    def _remove_path(self) -> None:
        """No file to remove: a TCP listener has none."""
