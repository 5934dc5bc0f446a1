"""Who may call a courier server: the program's secret, and the proofs of holding it.

A courier server unpickles what it receives, so a connection is code
execution. Every connection that does not come through the same-host Unix
socket (whose directory is private to the user) proves the secret before
the server reads a single frame:

* raw TCP: a mutual challenge–response. The server sends a fresh nonce; the
  client answers with its own nonce and ``HMAC(secret, 'client' | both
  nonces)``; the server answers ``HMAC(secret, 'server' | both nonces)``. The
  messages have fixed sizes, so nothing is allocated or decoded on the
  peer's say-so, and a recorded exchange is useless against a fresh nonce.
* gRPC: every call carries ``lp-auth`` metadata: a time, a random nonce and
  ``HMAC(secret, method | time | nonce)``, checked before the request bytes
  are decoded; a nonce is accepted once within its time window.

Where the secret comes from, first match wins: the ``secret=`` argument,
one registered for the address (``register_secret``: a launching process
that talks to several programs), the process default (``set_default_secret``:
a node process, once, before building anything).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import threading
import time

from launchpad_py.courier import errors

MAGIC = b'LPCOUR1\n'
NONCE_BYTES = 32
_MAC_BYTES = 32
SERVER_HELLO = len(MAGIC) + NONCE_BYTES
CLIENT_PROOF = len(MAGIC) + NONCE_BYTES + _MAC_BYTES
SERVER_PROOF = _MAC_BYTES
MIN_SECRET_BYTES = 16
METADATA_KEY = 'lp-auth'
PROOF_KEY = 'lp-auth-server'
# A gRPC token is good for this long either side of the server's clock (hosts' clocks
# differ by a little), and only once.
TOKEN_WINDOW_SECONDS = 60.0

_default: bytes | None = None
_by_address: dict[str, bytes] = {}
_lock = threading.Lock()


def check_secret(secret: bytes | None) -> bytes | None:
    """``secret`` itself when it is usable, else a ValueError saying why."""
    if secret is None:
        return None
    if not isinstance(secret, (bytes, bytearray)):
        raise TypeError(f'a courier secret must be bytes (got {type(secret).__name__})')
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(f'a courier secret must be at least {MIN_SECRET_BYTES} bytes '
                         f'(got {len(secret)}); use secrets.token_bytes(32)')
    return bytes(secret)


def set_default_secret(secret: bytes | None) -> None:
    """The secret every server and client of this process uses unless told otherwise."""
    global _default
    _default = check_secret(secret)


def default_secret() -> bytes | None:
    return _default


def register_secret(address: str, secret: bytes) -> None:
    """The secret of the server at ``address``, for clients and that server in this process."""
    with _lock:
        _by_address[address] = check_secret(secret)


def forget_secret(address: str) -> None:
    with _lock:
        _by_address.pop(address, None)


def secret_for(address: str | None, explicit: bytes | None = None) -> bytes | None:
    """The secret a client of (or a server bound to) ``address`` uses."""
    if explicit is not None:
        return check_secret(explicit)
    if address is not None:
        with _lock:
            found = _by_address.get(address)
        if found is not None:
            return found
    return _default


def _mac(secret: bytes | None, *parts: bytes) -> bytes:
    return hmac.new(secret or b'', b'|'.join(parts), hashlib.sha256).digest()


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError(f'the peer closed the connection after {len(data)} of {n} '
                           'handshake bytes')
        data += chunk
    return bytes(data)


class HandshakeFailed(Exception):
    """The peer did not prove the secret; the message says how (for the server's log)."""


def server_hello() -> tuple[bytes, bytes]:
    """The server's nonce, and the greeting that carries it."""
    nonce = os.urandom(NONCE_BYTES)
    return nonce, MAGIC + nonce


def check_client_proof(secret: bytes | None, ours: bytes, proof: bytes) -> bytes:
    """The server's answer to a client's ``CLIENT_PROOF`` bytes; raises HandshakeFailed.

    ``secret=None`` (an insecure server) checks the same exchange with an
    empty key, so both ends still agree they speak courier.
    """
    if proof[:len(MAGIC)] != MAGIC:
        raise HandshakeFailed(f'not a courier handshake (starts {proof[:8]!r})')
    theirs = proof[len(MAGIC):len(MAGIC) + NONCE_BYTES]
    if not hmac.compare_digest(proof[-_MAC_BYTES:], _mac(secret, b'client', ours, theirs)):
        raise HandshakeFailed('wrong secret')
    return _mac(secret, b'server', theirs, ours)


def client_handshake(sock: socket.socket, secret: bytes | None, address: str,
                     timeout: float) -> None:
    """Proves the secret to the server at ``address`` and checks its proof back."""
    sock.settimeout(timeout)
    try:
        hello = _recv_exactly(sock, SERVER_HELLO)
        if hello[:len(MAGIC)] != MAGIC:
            raise errors.CourierUnavailableError(
                f'{address} does not speak courier over TCP (greeted with {hello[:8]!r})')
        server_nonce = hello[len(MAGIC):]
        ours = os.urandom(NONCE_BYTES)
        sock.sendall(MAGIC + ours + _mac(secret, b'client', server_nonce, ours))
        answer = _recv_exactly(sock, SERVER_PROOF)
    except EOFError:
        raise errors.AuthenticationError(
            f'the courier server at {address} refused this client: '
            f'{"wrong secret" if secret else "it requires a secret and none was given"}'
        ) from None
    except TimeoutError:
        raise errors.CourierUnavailableError(f'no courier handshake from {address} within '
                                             f'{timeout:g} s') from None
    if not hmac.compare_digest(answer, _mac(secret, b'server', ours, server_nonce)):
        raise errors.AuthenticationError(
            f'the server at {address} could not prove it holds the program secret; '
            'nothing was sent to it')
    sock.settimeout(None)


def grpc_token(secret: bytes, method: str) -> tuple[tuple[tuple[str, str]], str]:
    """The metadata that authenticates one gRPC call of ``method``, and the server's answer.

    The server sends ``grpc_server_proof`` of the token back in its initial
    metadata, so the client decodes a reply only from a holder of the secret.
    """
    stamp = f'{time.time():.3f}'
    nonce = os.urandom(16).hex()
    mac = _mac(secret, method.encode(), stamp.encode(), nonce.encode()).hex()
    token = f'{stamp}/{nonce}/{mac}'
    return ((METADATA_KEY, token),), grpc_server_proof(secret, token)


def grpc_server_proof(secret: bytes, token: str) -> str:
    return _mac(secret, b'server', token.encode()).hex()


class TokenChecker:
    """Server side of the gRPC tokens: valid, fresh, and each nonce used once."""

    def __init__(self, secret: bytes):
        self._secret = secret
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()
        self._next_prune = 0.0

    def check(self, method: str, metadata) -> tuple[str | None, str | None]:
        """``(None, proof to send back)`` when the call may proceed, else ``(why not, None)``."""
        token = next((v for k, v in metadata or () if k == METADATA_KEY), None)
        if token is None:
            return 'no lp-auth token (the client has no secret)', None
        try:
            stamp, nonce, mac = token.split('/')
            sent = float(stamp)
            given = bytes.fromhex(mac)
        except (ValueError, IndexError):
            return 'malformed lp-auth token', None
        expected = _mac(self._secret, method.encode(), stamp.encode(), nonce.encode())
        if not hmac.compare_digest(given, expected):
            return 'wrong secret', None
        now = time.time()
        if abs(now - sent) > TOKEN_WINDOW_SECONDS:
            return f'token {now - sent:+.0f} s old (clocks apart, or replayed)', None
        with self._lock:
            if now >= self._next_prune:
                horizon = 2 * TOKEN_WINDOW_SECONDS
                self._seen = {k: t for k, t in self._seen.items() if now - t <= horizon}
                self._next_prune = now + 1.0
            if nonce in self._seen:
                return 'replayed token', None
            self._seen[nonce] = now
        return None, grpc_server_proof(self._secret, token)

