"""Telling a TLS listener from a plaintext one, for a client whose first call cannot connect.

A gRPC channel whose handshake fails (a plaintext client at a TLS server, or
the other way round) only ever shows ``TRANSIENT_FAILURE``, as a server not up
yet does; a call that waits for its server (no deadline) then waited for ever,
silently. ``mismatch`` asks the listener itself: it sends a TLS ClientHello
and reads the first bytes back. A TLS server answers with a handshake record
(0x16); a plaintext gRPC server answers HTTP/2 (its SETTINGS frame) or closes.
Nothing is decoded as a call on either side: the server refuses the bytes.
When both ends speak TLS but hold different credentials (another program's
certificate), the channel fails the same silent way; the probe then makes a
real handshake with the client's credentials and tells which end refused the
other's certificate.

    why = tls_probe.mismatch('10.0.0.5:5000', client_tls=None)  # None: no mismatch seen
"""

from __future__ import annotations

import socket
import ssl

from launchpad_py.courier.transports.tls import TlsCredentials

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


def certificate_refused(address: str, credentials: TlsCredentials,
                        timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why the TLS server at ``address`` and a client holding ``credentials`` can never
    complete mutual TLS (one end does not trust the other's certificate), or None when the
    handshake goes through or nothing can be told (nothing listens, no answer in time)."""
    host, _, port = address.rpartition(':')
    context = credentials.client_context()
    context.set_alpn_protocols(['h2'])  # As gRPC offers; its server refuses a hello without.
    try:
        with socket.create_connection((host.strip('[]'), int(port)), timeout=timeout) as raw:
            with context.wrap_socket(raw) as tls:
                tls.settimeout(timeout)
                # TLS 1.3: a server judges our certificate after the client's side of the
                # handshake is done. gRPC's then sends its HTTP/2 settings unasked, or, when
                # it refuses us, closes at once (no alert).
                if not tls.recv(1):
                    return (f'the server at {address} refused this client\'s certificate (it '
                            'closed the connection right after the TLS handshake): both ends '
                            'must hold the same TlsCredentials (is the server another '
                            'program\'s?)')
    except ssl.SSLCertVerificationError:
        return (f'the server at {address} presents a certificate that this client\'s '
                'TlsCredentials do not trust: both ends must hold the same credentials '
                '(is the server another program\'s?)')
    except ssl.SSLError as exc:
        if 'ALERT' in (exc.reason or '') and ('CERTIFICATE' in exc.reason or 'CA' in exc.reason):
            return (f'the server at {address} refused this client\'s certificate '
                    f'({exc.reason}): both ends must hold the same TlsCredentials (is the '
                    'server another program\'s?)')
        return None
    except OSError:
        return None
    return None


def mismatch(address: str, client_tls: TlsCredentials | None) -> str | None:
    """Why a client with TLS credentials ``client_tls`` (None: plaintext) can never talk to
    the server at ``address``, or None when the probe shows no mismatch."""
    server_tls = speaks_tls(address)
    if server_tls is None:
        return None
    if server_tls and client_tls is not None:
        return certificate_refused(address, client_tls)
    if server_tls == (client_tls is not None):
        return None
    if server_tls:
        return (f'the server at {address} wants TLS, and this client has none: give the '
                'client the server\'s TlsCredentials (tls=...)')
    return (f'the server at {address} does not speak TLS (plaintext), and this client was '
            'given TlsCredentials: give both ends the same setting')
