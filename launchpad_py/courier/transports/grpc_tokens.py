"""The gRPC path's proofs: a signed ``Endpoints`` answer, then a token per call.

The client first asks the server's identity (``Endpoints``, with a nonce of
its own; the answer, which also names the raw-TCP port, is MACed under the
server's key over that nonce, see ``auth.py``), checks the name, and only then
sends calls. Every call carries ``lp-auth``: the incarnation, a time, a
nonce, the SHA-256 of the request body and ``HMAC(key, method | those)``.
The server checks the MAC before the body is read, the body's hash before it
is decoded, and accepts a nonce once within its time window; it answers
``HMAC(key, 'reply' | token)``, which the client checks before it decodes a reply.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
import threading
import time
from typing import Iterable

from launchpad_py.courier import auth, errors

METADATA_KEY = 'lp-auth'
PROOF_KEY = 'lp-auth-server'
HELLO_KEY = 'lp-hello'
# The refusal of a token made for an earlier incarnation: the client asks again and retries.
STALE = 'made for another incarnation'
# A token is good for this long either side of the server's clock (hosts' clocks
# differ by a little), and only once.
TOKEN_WINDOW_SECONDS = 60.0
_PORT = struct.Struct('<H')


def hello_request() -> tuple[bytes, tuple[tuple[str, str]]]:
    """The client's nonce, and the metadata of the ``Endpoints`` call that carries it."""
    nonce = os.urandom(auth.NONCE_BYTES)
    return nonce, ((HELLO_KEY, nonce.hex()),)


def hello_reply(identity: auth.Identity, metadata, tcp_port: int) -> bytes | None:
    """The server's signed answer to ``Endpoints``; None when the request has no nonce."""
    nonce_hex = next((v for k, v in metadata or () if k == HELLO_KEY), '')
    try:
        nonce = bytes.fromhex(nonce_hex)
    except ValueError:
        return None
    if len(nonce) != auth.NONCE_BYTES:
        return None
    body = identity.incarnation + _PORT.pack(tcp_port) + auth.name_field(identity.name)
    return body + auth.mac(identity.key, b'hello', nonce, body)


def check_hello_reply(secret: bytes | None, nonce: bytes, reply: bytes, address: str,
                      expected: str | None) -> tuple[auth.Identity, int]:
    """The server's identity and raw-TCP port, once it proved both; AuthenticationError if not."""
    head = auth.INCARNATION_BYTES + _PORT.size + 1
    if len(reply) < head + auth.MAC_BYTES or len(reply) != head + reply[head - 1] + auth.MAC_BYTES:
        raise errors.AuthenticationError(
            f'the server at {address} sent a malformed identity ({len(reply)} bytes); '
            'nothing was sent to it')
    body, given = reply[:-auth.MAC_BYTES], reply[-auth.MAC_BYTES:]
    name = body[head:].decode(errors='replace')
    auth.check_expected(expected, name, address)
    identity = auth.Identity.of(secret, name, body[:auth.INCARNATION_BYTES])
    if not hmac.compare_digest(given, auth.mac(identity.key, b'hello', nonce, body)):
        raise errors.AuthenticationError(
            f'the server at {address} could not prove it holds the program secret; '
            'nothing was sent to it' if secret is not None else
            f'this client has no secret and the server at {address} requires one (or it is '
            'not a courier server); pass secret= or set the process default')
    return identity, _PORT.unpack_from(body, auth.INCARNATION_BYTES)[0]


def digest(parts: Iterable) -> str:
    """The SHA-256 (hex) of the concatenation of ``parts``: what a call token covers."""
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(part if isinstance(part, bytes) else memoryview(part).cast('B'))
    return hasher.hexdigest()


def grpc_token(identity: auth.Identity, method: str, body_digest: str) -> tuple[tuple, str]:
    """The metadata that authenticates one gRPC call of ``method`` with a body of
    ``body_digest`` at the server ``identity``, and the answer that server must send back."""
    stamp = f'{time.time():.3f}'
    nonce = os.urandom(16).hex()
    head = f'{identity.incarnation.hex()}/{stamp}/{nonce}/{body_digest}'
    token = f'{head}/{auth.mac(identity.key, method.encode(), head.encode()).hex()}'
    return ((METADATA_KEY, token),), grpc_server_proof(identity, token)


def grpc_server_proof(identity: auth.Identity, token: str) -> str:
    return auth.mac(identity.key, b'reply', token.encode()).hex()


class TokenChecker:
    """Server side of the gRPC tokens: for this server, valid, fresh, each nonce used once."""

    def __init__(self, identity: auth.Identity):
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
        if not hmac.compare_digest(given, auth.mac(self._identity.key, method.encode(),
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
