"""Telling a TLS listener from a plaintext one, for a client whose first call cannot connect.

A gRPC channel whose handshake fails (a plaintext client at a TLS server, or
the other way round) only ever shows ``TRANSIENT_FAILURE``, as a server not up
yet does; a call that waits for its server (no deadline) then waited for ever,
silently. ``mismatch`` asks the listener itself: it sends a TLS ClientHello
and reads the first bytes back. A TLS server answers with a handshake record
(0x16); a plaintext gRPC server answers HTTP/2 (its SETTINGS frame) or closes.
Nothing is decoded as a call on either side: the server refuses the bytes.

    why = tls_probe.mismatch('10.0.0.5:5000', client_tls=None)  # None: no mismatch seen
"""

from __future__ import annotations

import socket
import ssl

#: How long the probe may take to connect and to read the answer.
PROBE_TIMEOUT_S = 2.0
_TLS_HANDSHAKE_RECORD = 0x16


def _client_hello() -> bytes:
    """The bytes of a TLS ClientHello (made in memory: no socket, no certificate)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    outgoing = ssl.MemoryBIO()
    tls = context.wrap_bio(ssl.MemoryBIO(), outgoing)
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:  # It wrote its ClientHello and waits for the answer.
        pass
    return outgoing.read()


def speaks_tls(address: str, timeout: float = PROBE_TIMEOUT_S) -> bool | None:
    """Whether the listener at ``address`` answers a ClientHello as a TLS server; None when
    nothing listens there or it answers nothing in time (then nothing can be told)."""
    host, _, port = address.rpartition(':')
    try:
        with socket.create_connection((host.strip('[]'), int(port)), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(_client_hello())
            first = sock.recv(1)
    except ConnectionResetError:
        return False  # It read our hello and dropped us: not a TLS server.
    except OSError:  # Refused (not up yet), unreachable, or silent: nothing to tell.
        return None
    return bool(first) and first[0] == _TLS_HANDSHAKE_RECORD


def mismatch(address: str, client_tls: bool) -> str | None:
    """Why a client with (``client_tls``) or without TLS can never talk to the server at
    ``address``, or None when the probe shows no protocol mismatch."""
    server_tls = speaks_tls(address)
    if server_tls is None or server_tls == client_tls:
        return None
    if server_tls:
        return (f'the server at {address} wants TLS, and this client has none: give the '
                'client the server\'s TlsCredentials (tls=...)')
    return (f'the server at {address} does not speak TLS (plaintext), and this client was '
            'given TlsCredentials: give both ends the same setting')
