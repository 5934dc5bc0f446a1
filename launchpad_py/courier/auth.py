"""Who may call a courier server: the program's secret, and proofs made for one server.

A courier server unpickles what it receives, so a connection is code
execution. Every connection that does not come through the same-host Unix
socket (whose directory is private to the user) proves the secret before
the server reads a single frame, and every proof is made for one server:

* A server has an identity: its ``name`` (a launched node's ``label/index``;
  ``''`` when unnamed) and an ``incarnation``, 16 random bytes drawn at every
  start, so a restarted node is a new incarnation. Its key is
  ``HMAC(secret, name | incarnation)``; proofs are MACs under that key, so a
  proof made for one server (or one incarnation of it) is worthless at any
  other, and a restarted node's empty list of used nonces lets nothing old in.
* raw TCP: the server greets with a fresh nonce, its incarnation and name;
  the client refuses a name it did not expect, then answers with its own
  nonce and ``HMAC(key, 'client' | both nonces)``; the server answers
  ``HMAC(key, 'server' | both nonces)``. The client's messages have fixed
  sizes, so nothing is allocated or decoded on the peer's say-so.
* gRPC: the client first asks the server's identity (``Endpoints``, with a
  nonce of its own; the answer, which also names the raw-TCP port, is MACed
  under the key over that nonce), checks the name, and only then sends
  calls. Every call carries ``lp-auth``: the incarnation, a time, a nonce,
  the SHA-256 of the request body and ``HMAC(key, method | those)``. The
  MAC is checked before the body is read, the body's hash before it is
  decoded, and a nonce is accepted once within its time window; the server
  answers ``HMAC(key, 'reply' | token)`` before the client decodes a reply.

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
import struct
import threading
import time
from typing import Iterable, NamedTuple

from launchpad_py.courier import errors

MAGIC = b'LPCOUR2\n'
NONCE_BYTES = 32
INCARNATION_BYTES = 16
MAX_NAME_BYTES = 255
_MAC_BYTES = 32
# The greeting's fixed part: magic, server nonce, incarnation, length of the name.
SERVER_HELLO = len(MAGIC) + NONCE_BYTES + INCARNATION_BYTES + 1
CLIENT_PROOF = len(MAGIC) + NONCE_BYTES + _MAC_BYTES
SERVER_PROOF = _MAC_BYTES
MIN_SECRET_BYTES = 16
METADATA_KEY = 'lp-auth'
PROOF_KEY = 'lp-auth-server'
HELLO_KEY = 'lp-hello'
# The gRPC refusal of a token made for an earlier incarnation: the client asks again and retries.
STALE = 'made for another incarnation'
# A gRPC token is good for this long either side of the server's clock (hosts' clocks
# differ by a little), and only once.
TOKEN_WINDOW_SECONDS = 60.0
_PORT = struct.Struct('<H')

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


def check_name(name: str | None, what: str) -> str:
    """A server's name as bytes-safe text ('' for None); a ValueError naming a bad one."""
    if name is None:
        return ''
    if not isinstance(name, str) or len(name.encode()) > MAX_NAME_BYTES:
        raise ValueError(f'{what} must be a str of at most {MAX_NAME_BYTES} UTF-8 bytes '
                         f'(got {name!r})')
    return name


class Identity(NamedTuple):
    """Who a server is: its name, its incarnation, and the key made for both."""

    name: str
    incarnation: bytes
    key: bytes

    @classmethod
    def of(cls, secret: bytes | None, name: str, incarnation: bytes) -> 'Identity':
        key = _mac(secret, b'server-key', name.encode(), incarnation)
        return cls(name, incarnation, key)

    @classmethod
    def fresh(cls, secret: bytes | None, name: str) -> 'Identity':
        """A new incarnation of the server ``name`` (one per start)."""
        return cls.of(secret, name, os.urandom(INCARNATION_BYTES))

    def describe(self) -> str:
        return f'{self.name or "(unnamed)"} incarnation {self.incarnation.hex()[:8]}'


def _mac(key: bytes | None, *parts: bytes) -> bytes:
    return hmac.new(key or b'', b'|'.join(parts), hashlib.sha256).digest()


def _name_field(name: str) -> bytes:
    encoded = name.encode()
    return bytes([len(encoded)]) + encoded


def check_expected(expected: str | None, found: str, address: str) -> None:
    """Refuses a server that proves a name other than the one the client meant to reach."""
    if expected is not None and found != expected:
        raise errors.AuthenticationError(
            f'the server at {address} is {found or "(unnamed)"!r}, not {expected!r} (a '
            'process that took a dead node\'s port, or a relay); nothing was sent to it')


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


# -- raw TCP --------------------------------------------------------------------------


def server_hello(identity: Identity) -> tuple[bytes, bytes]:
    """The server's nonce, and the greeting that carries it with the server's identity."""
    nonce = os.urandom(NONCE_BYTES)
    return nonce, MAGIC + nonce + identity.incarnation + _name_field(identity.name)


def check_client_proof(identity: Identity, ours: bytes, proof: bytes) -> bytes:
    """The server's answer to a client's ``CLIENT_PROOF`` bytes; raises HandshakeFailed.

    An insecure server (no secret) checks the same exchange under the key of
    an empty secret, so both ends still agree they speak courier.
    """
    if proof[:len(MAGIC)] != MAGIC:
        raise HandshakeFailed(f'not a courier handshake (starts {proof[:8]!r})')
    theirs = proof[len(MAGIC):len(MAGIC) + NONCE_BYTES]
    if not hmac.compare_digest(proof[-_MAC_BYTES:],
                               _mac(identity.key, b'client', ours, theirs)):
        raise HandshakeFailed('wrong secret, or a proof made for another server')
    return _mac(identity.key, b'server', theirs, ours)


def client_handshake(sock: socket.socket, secret: bytes | None, address: str,
                     timeout: float, expected: str | None = None) -> Identity:
    """Proves the secret to the server at ``address`` if it is ``expected``; returns its identity.

    The server's name is checked before the client answers: a proof made for
    a server the client did not mean to reach is never sent.
    """
    sock.settimeout(timeout)
    try:
        hello = _recv_exactly(sock, SERVER_HELLO)
        if hello[:len(MAGIC)] != MAGIC:
            raise errors.CourierUnavailableError(
                f'{address} does not speak courier over TCP (greeted with {hello[:8]!r})')
        server_nonce = hello[len(MAGIC):len(MAGIC) + NONCE_BYTES]
        incarnation = hello[len(MAGIC) + NONCE_BYTES:-1]
        name = _recv_exactly(sock, hello[-1]).decode(errors='replace')
        check_expected(expected, name, address)
        identity = Identity.of(secret, name, incarnation)
        ours = os.urandom(NONCE_BYTES)
        sock.sendall(MAGIC + ours + _mac(identity.key, b'client', server_nonce, ours))
        answer = _recv_exactly(sock, SERVER_PROOF)
    except EOFError:
        raise errors.AuthenticationError(
            f'the courier server at {address} refused this client: '
            f'{"wrong secret" if secret else "it requires a secret and none was given"}'
        ) from None
    except TimeoutError:
        raise errors.CourierUnavailableError(f'no courier handshake from {address} within '
                                             f'{timeout:g} s') from None
    if not hmac.compare_digest(answer, _mac(identity.key, b'server', ours, server_nonce)):
        raise errors.AuthenticationError(
            f'the server at {address} could not prove it holds the program secret; '
            'nothing was sent to it')
    sock.settimeout(None)
    return identity


# -- gRPC -----------------------------------------------------------------------------


def hello_request() -> tuple[bytes, tuple[tuple[str, str]]]:
    """The client's nonce, and the metadata of the ``Endpoints`` call that carries it."""
    nonce = os.urandom(NONCE_BYTES)
    return nonce, ((HELLO_KEY, nonce.hex()),)


def hello_reply(identity: Identity, metadata, tcp_port: int) -> bytes | None:
    """The server's signed answer to ``Endpoints``; None when the request has no nonce."""
    nonce_hex = next((v for k, v in metadata or () if k == HELLO_KEY), '')
    try:
        nonce = bytes.fromhex(nonce_hex)
    except ValueError:
        return None
    if len(nonce) != NONCE_BYTES:
        return None
    body = identity.incarnation + _PORT.pack(tcp_port) + _name_field(identity.name)
    return body + _mac(identity.key, b'hello', nonce, body)


def check_hello_reply(secret: bytes | None, nonce: bytes, reply: bytes, address: str,
                      expected: str | None) -> tuple[Identity, int]:
    """The server's identity and raw-TCP port, once it proved both; AuthenticationError if not."""
    head = INCARNATION_BYTES + _PORT.size + 1
    if len(reply) < head + _MAC_BYTES or len(reply) != head + reply[head - 1] + _MAC_BYTES:
        raise errors.AuthenticationError(
            f'the server at {address} sent a malformed identity ({len(reply)} bytes); '
            'nothing was sent to it')
    body, mac = reply[:-_MAC_BYTES], reply[-_MAC_BYTES:]
    name = body[head:].decode(errors='replace')
    check_expected(expected, name, address)
    identity = Identity.of(secret, name, body[:INCARNATION_BYTES])
    if not hmac.compare_digest(mac, _mac(identity.key, b'hello', nonce, body)):
        raise errors.AuthenticationError(
            f'the server at {address} could not prove it holds the program secret; '
            'nothing was sent to it' if secret is not None else
            f'this client has no secret and the server at {address} requires one (or it is '
            'not a courier server); pass secret= or set the process default')
    return identity, _PORT.unpack_from(body, INCARNATION_BYTES)[0]


def digest(parts: Iterable) -> str:
    """The SHA-256 (hex) of the concatenation of ``parts``: what a call token covers."""
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(part if isinstance(part, bytes) else memoryview(part).cast('B'))
    return hasher.hexdigest()


def grpc_token(identity: Identity, method: str, body_digest: str) -> tuple[tuple, str]:
    """The metadata that authenticates one gRPC call of ``method`` with a body of
    ``body_digest`` at the server ``identity``, and the answer that server must send back."""
    stamp = f'{time.time():.3f}'
    nonce = os.urandom(16).hex()
    head = f'{identity.incarnation.hex()}/{stamp}/{nonce}/{body_digest}'
    token = f'{head}/{_mac(identity.key, method.encode(), head.encode()).hex()}'
    return ((METADATA_KEY, token),), grpc_server_proof(identity, token)


def grpc_server_proof(identity: Identity, token: str) -> str:
    return _mac(identity.key, b'reply', token.encode()).hex()


class TokenChecker:
    """Server side of the gRPC tokens: for this server, valid, fresh, each nonce used once."""

    def __init__(self, identity: Identity):
        self._identity = identity
        self._incarnation = identity.incarnation.hex()
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()
        self._next_prune = 0.0

    def check(self, method: str, metadata) -> tuple[str | None, str | None, str | None]:
        """``(None, body digest, proof to send back)`` when the call may proceed (once its
        body matches the digest), else ``(why not, None, None)``."""
        token = next((v for k, v in metadata or () if k == METADATA_KEY), None)
        if token is None:
            return 'no lp-auth token (the client has no secret)', None, None
        try:
            head, _, mac = token.rpartition('/')
            incarnation, stamp, nonce, body_digest = head.split('/')
            sent = float(stamp)
            given = bytes.fromhex(mac)
        except ValueError:
            return 'malformed lp-auth token', None, None
        if incarnation != self._incarnation:
            return (f'token {STALE} (this is {self._identity.describe()}; a restarted '
                    'server, or a token taken elsewhere)'), None, None
        if not hmac.compare_digest(given, _mac(self._identity.key, method.encode(),
                                               head.encode())):
            return 'wrong secret, or a token made for another server', None, None
        now = time.time()
        if abs(now - sent) > TOKEN_WINDOW_SECONDS:
            return f'token {now - sent:+.0f} s old (clocks apart, or replayed)', None, None
        with self._lock:
            if now >= self._next_prune:
                horizon = 2 * TOKEN_WINDOW_SECONDS
                self._seen = {k: t for k, t in self._seen.items() if now - t <= horizon}
                self._next_prune = now + 1.0
            if nonce in self._seen:
                return 'replayed token', None, None
            self._seen[nonce] = now
        return None, body_digest, grpc_server_proof(self._identity, token)
