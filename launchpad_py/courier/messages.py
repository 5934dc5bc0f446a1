"""The call and reply messages shared by courier servers and clients.

A request is ``(method, args, kwargs)``. A reply is ``('ok', value)`` or
``('error', RemoteFailure)``. Both travel as frames (``frames.py``), whichever
path carries them. Keeping this in one module keeps the server and client in
agreement about the wire format.
"""

from __future__ import annotations

import dataclasses
import traceback

from launchpad_py.courier import errors, serialization

SERVICE = 'courier.Courier'
CALL = f'/{SERVICE}/Call'
CALL_CHUNKED = f'/{SERVICE}/CallChunked'
FETCH = f'/{SERVICE}/Fetch'
LIST_METHODS = f'/{SERVICE}/ListMethods'
ENDPOINTS = f'/{SERVICE}/Endpoints'


@dataclasses.dataclass
class RemoteFailure:
    """An exception raised by a served method, packed to survive the trip."""

    exception_bytes: bytes | None
    type_name: str
    message: str
    traceback: str
    label: str | None
    method: str

    @classmethod
    def capture(cls, exc: BaseException, label: str | None, method: str) -> 'RemoteFailure':
        text = ''.join(traceback.format_exception(exc))
        try:
            exception_bytes = serialization.dumps(exc)
        except Exception:  # An unpicklable exception still reports its type and text.
            exception_bytes = None
        return cls(exception_bytes, f'{type(exc).__module__}.{type(exc).__qualname__}',
                   str(exc), text, label, method)

    def rebuild(self) -> BaseException:
        """The original exception where it unpickles here, else a RemoteError."""
        exc: BaseException | None = None
        if self.exception_bytes is not None:
            try:
                exc = serialization.loads(self.exception_bytes)
            except Exception:
                exc = None
        if not isinstance(exc, BaseException):
            exc = errors.RemoteError(f'{self.type_name}: {self.message}')
        exc.__cause__ = errors.RemoteTraceback(self.traceback)
        exc.remote_traceback = self.traceback  # type: ignore[attr-defined]
        if getattr(exc, 'remote_origin', None) is None:  # Passed on by a peer: keep the first.
            exc.remote_origin = (self.label, self.method)  # type: ignore[attr-defined]
        where = f'node {self.label!r}' if self.label else 'a courier server'
        exc.add_note(f'raised remotely by method {self.method!r} of {where}')
        return exc
