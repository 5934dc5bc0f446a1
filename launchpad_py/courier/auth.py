"""Who may call a courier server: the program's secret, and keys made for one server.

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
* Each transport proves it its own way, with what this module offers (the
  key, ``mac``, the check of the name a client expects): raw TCP with a
  challenge and answer per connection (``transports/tcp_handshakes.py``),
  gRPC with a signed ``Endpoints`` answer and a token per call bound to the
  request body (``transports/grpc_tokens.py``).

Where the secret comes from, first match wins: the ``secret=`` argument,
one registered for the address (``register_secret``: a launching process
that talks to several programs), the process default (``set_default_secret``:
a node process, once, before building anything).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import threading
from typing import NamedTuple

from launchpad_py.courier import errors

NONCE_BYTES = 32
INCARNATION_BYTES = 16
MAX_NAME_BYTES = 255
MAC_BYTES = 32
MIN_SECRET_BYTES = 16

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
        key = mac(secret, b'server-key', name.encode(), incarnation)
        return cls(name, incarnation, key)

    @classmethod
    def fresh(cls, secret: bytes | None, name: str) -> 'Identity':
        """A new incarnation of the server ``name`` (one per start)."""
        return cls.of(secret, name, os.urandom(INCARNATION_BYTES))

    def describe(self) -> str:
        return f'{self.name or "(unnamed)"} incarnation {self.incarnation.hex()[:8]}'


def mac(key: bytes | None, *parts: bytes) -> bytes:
    """HMAC-SHA256 under ``key`` of ``parts`` joined by ``|``: every proof of every transport."""
    keyed = _keyed(key or b'').copy()
    keyed.update(b'|'.join(parts))
    return keyed.digest()


@functools.lru_cache(maxsize=1024)
def _keyed(key: bytes):
    """An HMAC already keyed with ``key``, to copy: a copy skips hashing the padded key,
    a quarter of a MAC's cost, and a gRPC call makes four MACs (see bench/proof_cost.py)."""
    return hmac.new(key, digestmod=hashlib.sha256)


def name_field(name: str) -> bytes:
    """A server's name as sent in its greetings: one length byte, then the UTF-8 bytes."""
    encoded = name.encode()
    return bytes([len(encoded)]) + encoded


def check_expected(expected: str | None, found: str, address: str) -> None:
    """Refuses a server that proves a name other than the one the client meant to reach."""
    if expected is not None and found != expected:
        raise errors.AuthenticationError(
            f'the server at {address} is {found or "(unnamed)"!r}, not {expected!r} (a '
            'process that took a dead node\'s port, or a relay); nothing was sent to it')
