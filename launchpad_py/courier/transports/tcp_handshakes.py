"""The raw-TCP handshake: what each side proves, and the door that runs it for a listener.

The server greets with a fresh nonce, its incarnation and name; the client
refuses a name it did not expect, then answers with its own nonce and
``HMAC(key, 'client' | both nonces)`` under the server's key (``auth.py``);
the server answers ``HMAC(key, 'server' | both nonces)``. The client's
messages have fixed sizes, so nothing is allocated or decoded on the peer's
say-so. An insecure server (no secret) runs the same exchange under the key
of an empty secret, so both ends still agree they speak courier.

The door (``Gate``) runs every handshake in flight of one listener in one
thread, and hands each authenticated socket to a second thread that admits it
(``admit`` starts the connection's reader thread, and ``Thread.start`` waits until
that thread has run: on a loaded machine, many milliseconds each; done by the
door, 1,000 clients dialling at once queued behind each other's admissions
until some handshakes timed out, issue 25's fan-in over ssh). Unauthenticated
connections cost a socket and a few bytes each, never a thread or an allocation
sized by the peer, so a flood of connections that never authenticate cannot
starve legitimate callers: when ``max_pending`` are waiting, the oldest is
dropped. Each connection gets ``timeout`` seconds to finish (TLS, if any, then
the proof); one that fails is closed and logged once with its address.
Authenticated sockets go to ``admit(sock, peer)`` in blocking mode.
"""

from __future__ import annotations

import errno
import hmac
import logging
import os
import queue
import selectors
import socket
import ssl
import threading
import time
from typing import Callable

from launchpad_py.courier import auth, errors, open_files

_log = logging.getLogger('launchpad_py.courier')

MAGIC = b'LPCOUR2\n'
# The greeting's fixed part: magic, server nonce, incarnation, length of the name.
SERVER_HELLO = len(MAGIC) + auth.NONCE_BYTES + auth.INCARNATION_BYTES + 1
CLIENT_PROOF = len(MAGIC) + auth.NONCE_BYTES + auth.MAC_BYTES
SERVER_PROOF = auth.MAC_BYTES


class HandshakeFailed(Exception):
    """The peer did not prove the secret; the message says how (for the server's log)."""


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    """``n`` bytes from ``sock``; EOFError when the peer closes first."""
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError(f'the peer closed the connection after {len(data)} of {n} '
                           'handshake bytes')
        data += chunk
    return bytes(data)


def server_hello(identity: auth.Identity) -> tuple[bytes, bytes]:
    """The server's nonce, and the greeting that carries it with the server's identity."""
    nonce = os.urandom(auth.NONCE_BYTES)
    return nonce, MAGIC + nonce + identity.incarnation + auth.name_field(identity.name)


def check_client_proof(identity: auth.Identity, ours: bytes, proof: bytes) -> bytes:
    """The server's answer to a client's ``CLIENT_PROOF`` bytes; raises HandshakeFailed."""
    if proof[:len(MAGIC)] != MAGIC:
        raise HandshakeFailed(f'not a courier handshake (starts {proof[:8]!r})')
    theirs = proof[len(MAGIC):len(MAGIC) + auth.NONCE_BYTES]
    if not hmac.compare_digest(proof[-auth.MAC_BYTES:],
                               auth.mac(identity.key, b'client', ours, theirs)):
        raise HandshakeFailed('wrong secret, or a proof made for another server')
    return auth.mac(identity.key, b'server', theirs, ours)


def client_handshake(sock: socket.socket, secret: bytes | None, address: str,
                     timeout: float, expected: str | None = None) -> auth.Identity:
    """Proves the secret to the server at ``address`` if it is ``expected``; returns its identity.

    The server's name is checked before the client answers: a proof made for
    a server the client did not mean to reach is never sent.
    """
    sock.settimeout(timeout)
    try:
        hello = recv_exactly(sock, SERVER_HELLO)
        if hello[:len(MAGIC)] != MAGIC:
            raise errors.CourierUnavailableError(
                f'{address} does not speak courier over TCP (greeted with {hello[:8]!r})')
        server_nonce = hello[len(MAGIC):len(MAGIC) + auth.NONCE_BYTES]
        incarnation = hello[len(MAGIC) + auth.NONCE_BYTES:-1]
        name = recv_exactly(sock, hello[-1]).decode(errors='replace')
        auth.check_expected(expected, name, address)
        identity = auth.Identity.of(secret, name, incarnation)
        ours = os.urandom(auth.NONCE_BYTES)
        sock.sendall(MAGIC + ours + auth.mac(identity.key, b'client', server_nonce, ours))
        answer = recv_exactly(sock, SERVER_PROOF)
    except EOFError:
        raise errors.AuthenticationError(
            f'the courier server at {address} refused this client: '
            f'{"wrong secret" if secret else "it requires a secret and none was given"}'
        ) from None
    except TimeoutError:
        raise errors.HandshakeTimeoutError(f'no courier handshake from {address} within '
                                           f'{timeout:g} s') from None
    if not hmac.compare_digest(answer, auth.mac(identity.key, b'server', ours, server_nonce)):
        raise errors.AuthenticationError(
            f'the server at {address} could not prove it holds the program secret; '
            'nothing was sent to it')
    sock.settimeout(None)
    return identity


class _Pending:
    __slots__ = ('sock', 'peer', 'deadline', 'nonce', 'received', 'tls_done')

    def __init__(self, sock, peer, deadline: float, tls_done: bool):
        self.sock, self.peer, self.deadline = sock, peer, deadline
        self.nonce: bytes | None = None
        self.received = b''
        self.tls_done = tls_done


class Gate:
    """Accepts on ``listener`` and runs the handshakes until ``close()``."""

    def __init__(self, listener: socket.socket, identity: auth.Identity, name: str,
                 admit: Callable, tls: ssl.SSLContext | None, timeout: float, max_pending: int):
        self._listener = listener
        self._identity = identity
        self._name = name
        self._admit = admit
        self._tls = tls
        self._timeout = timeout
        self._max_pending = max_pending
        self._pending: dict[int, _Pending] = {}  # By file descriptor, oldest first.
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._closed = False
        self._admitted: queue.SimpleQueue = queue.SimpleQueue()  # (sock, peer); None: end.

    def close(self) -> None:
        self._closed = True
        try:
            self._wake_w.send(b'x')
        except OSError:
            pass

    def run(self) -> None:
        listener = self._listener
        listener.setblocking(False)
        self._selector.register(listener, selectors.EVENT_READ)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        admitter = threading.Thread(target=self._admit_each, name=f'{self._name}-admit',
                                    daemon=True)
        admitter.start()
        try:
            while not self._closed:
                wait = (min(p.deadline for p in self._pending.values()) - time.monotonic()
                        if self._pending else None)
                for key, _ in self._selector.select(None if wait is None else max(0.0, wait)):
                    if key.fileobj is listener:
                        self._accept()
                    elif key.fileobj is not self._wake_r:
                        self._advance(self._pending.get(key.fd))
                now = time.monotonic()
                for entry in [p for p in self._pending.values() if p.deadline <= now]:
                    self._fail(entry, f'no handshake within {self._timeout:g} s')
        finally:
            self._admitted.put(None)  # The last item: only this thread puts.
            admitter.join(timeout=2.0)
            for entry in list(self._pending.values()):
                self._drop(entry)
            self._selector.close()
            self._wake_r.close()
            self._wake_w.close()

    def _accept(self) -> None:
        while True:
            try:
                with open_files.taking_descriptors():  # Not while gRPC starts on the reserve.
                    sock, peer = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE) and self._pending:
                    # Out of descriptors: the oldest waiting stranger makes room.
                    self._fail(next(iter(self._pending.values())), 'dropped: out of descriptors')
                    continue
                return  # The listener closed (stop).
            if len(self._pending) >= self._max_pending:
                oldest = next(iter(self._pending.values()))
                self._fail(oldest, f'dropped: {self._max_pending} connections were waiting '
                                   'to authenticate')
            sock.setblocking(False)
            tls_done = self._tls is None
            if not tls_done:
                sock = self._tls.wrap_socket(sock, server_side=True,
                                             do_handshake_on_connect=False)
            entry = _Pending(sock, peer, time.monotonic() + self._timeout, tls_done)
            self._pending[sock.fileno()] = entry
            self._selector.register(sock, selectors.EVENT_READ)
            self._advance(entry)

    def _advance(self, entry: _Pending | None) -> None:
        """Moves one handshake as far as the bytes at hand allow."""
        if entry is None:
            return
        try:
            if not entry.tls_done:
                entry.sock.do_handshake()
                entry.tls_done = True
            if entry.nonce is None:
                entry.nonce, hello = server_hello(self._identity)
                entry.sock.send(hello)  # At most 312 bytes into an empty buffer: never partial.
            while len(entry.received) < CLIENT_PROOF:
                chunk = entry.sock.recv(CLIENT_PROOF - len(entry.received))
                if not chunk:
                    raise HandshakeFailed(
                        f'closed after {len(entry.received)} of {CLIENT_PROOF} '
                        'handshake bytes')
                entry.received += chunk
            answer = check_client_proof(self._identity, entry.nonce, entry.received)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
            return
        except HandshakeFailed as exc:
            self._fail(entry, str(exc))
            return
        except (ssl.SSLError, OSError) as exc:
            self._fail(entry, f'connection failed during the handshake: {exc}')
            return
        self._forget(entry)
        try:
            entry.sock.setblocking(True)
            entry.sock.sendall(answer)
        except OSError:
            entry.sock.close()
            return
        self._admitted.put((entry.sock, entry.peer))

    def _admit_each(self) -> None:
        """The admitting thread: serves each authenticated socket, until the door closes."""
        while (item := self._admitted.get()) is not None:
            sock, peer = item
            if self._closed:
                sock.close()
            else:
                self._admit(sock, peer)  # After a stop, admit closes it too.

    def _fail(self, entry: _Pending, why: str) -> None:
        if not self._closed:
            _log.warning('courier server %s: closed a TCP connection from %s: %s',
                         self._name, peer_text(entry.peer), why)
        self._drop(entry)

    def _forget(self, entry: _Pending) -> None:
        self._pending.pop(entry.sock.fileno(), None)
        try:
            self._selector.unregister(entry.sock)
        except (KeyError, ValueError):
            pass

    def _drop(self, entry: _Pending) -> None:
        self._forget(entry)
        entry.sock.close()


def peer_text(peer) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f'{peer[0]}:{peer[1]}'
    return str(peer)
