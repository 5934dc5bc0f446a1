"""The courier exception tree, and the one place where gRPC failures are translated.

User code catches these instead of ``grpc.RpcError``::

    try:
        client.step(timeout=1)
    except courier.CourierTimeoutError:
        ...

Exceptions raised *by the served method* are not wrapped: they are re-raised
in the caller as their own type (see ``client.py``), with the remote traceback
as ``__cause__`` and a note naming the node and method.
"""

from __future__ import annotations


class CourierError(Exception):
    """A call could not be carried out by the transport."""


class CourierTimeoutError(CourierError, TimeoutError):
    """The call's deadline passed before the server answered."""


class CourierUnavailableError(CourierError, ConnectionError):
    """The server could not be reached (not started, stopped, or crashed)."""


class HandshakeTimeoutError(CourierUnavailableError):
    """The server took the connection but did not finish the courier handshake in time: an
    overloaded server (1,000 clients dialling at once), or an address that answers nothing.
    Over gRPC: the first contact (``Endpoints``) lost its connection before its answer, as
    when a starved server times out the HTTP/2 handshake. A call without a deadline dials
    again (``client.py``); one with a deadline fails."""


class TlsMismatchError(CourierError):
    """One end of a call uses TLS and the other does not, or both do with different
    credentials: no call can ever go through, so the client says so instead of waiting for
    a server that is already there."""


class CourierCancelledError(CourierError):
    """The call was cancelled before it completed."""


class UnknownMethodError(CourierError, AttributeError):
    """The server's object has no public method of that name."""


class RemoteError(CourierError):
    """A remote exception whose own type could not be rebuilt in the caller."""


class RemoteTraceback(Exception):
    """Carries the server-side traceback text; attached as ``__cause__``."""

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return '\n\n"""\n' + self.text.rstrip() + '\n"""'


def translate_rpc_error(error: grpc.RpcError, address: str, method: str) -> CourierError:
    """Maps a gRPC status to the courier exception tree, naming address and method.

    grpc is imported here, not with the module: only a process that made a gRPC call
    has an error to map, and one that never did should not load gRPC (issue 25)."""
    import grpc  # noqa: PLC0415
    code = error.code() if hasattr(error, 'code') else None
    details = error.details() if hasattr(error, 'details') else str(error)
    where = f'calling {method!r} on {address}'
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return CourierTimeoutError(f'timed out {where}')
    if code == grpc.StatusCode.UNAVAILABLE:
        return CourierUnavailableError(f'server unavailable {where}: {details}')
    if code == grpc.StatusCode.CANCELLED:
        return CourierCancelledError(f'cancelled {where}')
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return AuthenticationError(f'the server refused this client {where}: {details}')
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return CourierError(f'message too large or server overloaded {where}: {details}')
    name = code.name if code is not None else 'UNKNOWN'
    return CourierError(f'{name} {where}: {details}')


class AuthenticationError(CourierError):
    """The server refused this client's proof of the secret, or could not prove its own."""
