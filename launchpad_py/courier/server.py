"""Serves the public methods of any Python object over gRPC.

    server = courier.Server(Counter(), port=0)
    server.start()            # server.address == '127.0.0.1:PORT'

Public means: a name from ``dir()`` (or reachable with ``getattr``, so
delegating wrappers work) that does not start with ``_`` and is not ``run``,
whose value is callable; plus ``__call__`` when the object itself is callable.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any, Callable

import grpc

from launchpad_py.courier import errors, serialization, wire

# Unlimited message sizes; SO_REUSEPORT off so two servers can never silently share a port.
GRPC_OPTIONS = [
    ('grpc.max_send_message_length', -1),
    ('grpc.max_receive_message_length', -1),
    ('grpc.so_reuseport', 0),
]


def public_methods(obj: Any) -> list[str]:
    """Names a client may call on ``obj``, sorted."""
    names = []
    for name in dir(obj):
        if name.startswith('_') or name == 'run':
            continue
        try:
            attr = getattr(obj, name)
        except Exception:  # A property that raises is simply not a method.
            continue
        if callable(attr):
            names.append(name)
    if callable(obj):
        names.append('__call__')
    return sorted(names)


class Server:
    """A gRPC server for one object; calls run on a bounded thread pool."""

    def __init__(self, obj: Any, port: int = 0, *, host: str = '127.0.0.1',
                 thread_pool_size: int = 16, label: str | None = None,
                 thread_initializer: Callable[[], None] | None = None):
        if not isinstance(thread_pool_size, int) or thread_pool_size < 1:
            raise ValueError(f'thread_pool_size must be a positive int (got {thread_pool_size!r})')
        self._obj = obj
        self._host = host
        self._requested_port = port
        self._label = label
        self._pool = concurrent.futures.ThreadPoolExecutor(
            thread_pool_size, thread_name_prefix=f'courier-{label or "server"}',
            initializer=thread_initializer)  # E.g. to tell handler threads which node they serve.
        self._server: grpc.Server | None = None
        self._port: int | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError('the server is not started; call start() first')
        return self._port

    @property
    def address(self) -> str:
        return f'{self._host}:{self.port}'

    def start(self) -> 'Server':
        server = grpc.server(self._pool, options=GRPC_OPTIONS,
                             maximum_concurrent_rpcs=None)
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(wire.SERVICE, {
            'Call': grpc.unary_unary_rpc_method_handler(self._handle_call),
            'ListMethods': grpc.unary_unary_rpc_method_handler(self._handle_list_methods),
        })])
        target = f'{self._host}:{self._requested_port}'
        try:
            port = server.add_insecure_port(target)
        except RuntimeError as exc:
            port, cause = 0, exc
        else:
            cause = None
        if not port:
            raise errors.CourierError(
                f'courier server {self._label or ""} could not bind {target}: '
                'the port is in use or the host is not local') from cause
        server.start()
        self._server, self._port = server, port
        return self

    def stop(self, grace: float | None = None) -> None:
        if self._server is not None:
            self._server.stop(grace).wait()
            self._server = None
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> 'Server':
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def _resolve(self, name: str):
        if name == '__call__' and callable(self._obj):
            return self._obj
        if not name.startswith('_') and name != 'run':
            try:
                attr = getattr(self._obj, name)
            except AttributeError:
                attr = None
            if callable(attr):
                return attr
        available = ', '.join(public_methods(self._obj)) or '(none)'
        raise errors.UnknownMethodError(
            f'{type(self._obj).__name__} served by {self._label or "this server"} has no public '
            f'method {name!r}; available: {available}')

    def _handle_call(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        method = '?'
        try:
            method, args, kwargs = serialization.loads(request)
            result = self._resolve(method)(*args, **kwargs)
            return serialization.dumps(('ok', result))
        except Exception as exc:  # Every failure travels back to the caller.
            return serialization.dumps(('error', wire.RemoteFailure.capture(exc, self._label, method)))

    def _handle_list_methods(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        return serialization.dumps(public_methods(self._obj))
