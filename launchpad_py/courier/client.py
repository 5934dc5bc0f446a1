"""Calls the methods of an object served by a courier ``Server``.

    client = courier.Client('127.0.0.1:5000', timeout=10)
    client.add(1, 2)                      # synchronous
    future = client.futures.add(1, 2)     # concurrent.futures.Future
    courier.list_methods(client)          # ['add', ...]

Channels are shared per address within a process, so many clients of one
server cost one connection.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import threading
from typing import Any

import grpc

from launchpad_py.courier import errors, serialization, wire
from launchpad_py.courier.server import GRPC_OPTIONS

Timeout = float | int | datetime.timedelta | None

_channels: dict[str, grpc.Channel] = {}
_channels_lock = threading.Lock()


def _channel(address: str) -> grpc.Channel:
    with _channels_lock:
        channel = _channels.get(address)
        if channel is None:
            channel = grpc.insecure_channel(address, options=GRPC_OPTIONS)
            _channels[address] = channel
        return channel


def _seconds(timeout: Timeout) -> float | None:
    """Falsy means no deadline; timedelta, int and float are accepted."""
    if not timeout:
        return None
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    if isinstance(timeout, (int, float)):
        return float(timeout)
    raise TypeError(f'timeout must be a float, int or timedelta (got {timeout!r})')


def _decode_reply(reply: bytes) -> Any:
    status, value = serialization.loads(reply)
    if status == 'ok':
        return value
    raise value.rebuild()


class Client:
    """A proxy whose attribute calls run on the remote object."""

    def __init__(self, address: str, *, timeout: Timeout = None, wait_for_ready: bool = True):
        if not isinstance(address, str) or ':' not in address:
            raise ValueError(f"address must be 'host:port' (got {address!r})")
        self._address = address
        self._timeout = _seconds(timeout)
        self._wait_for_ready = wait_for_ready
        self._stub = _channel(address).unary_unary(wire.CALL)

    @property
    def address(self) -> str:
        return self._address

    @property
    def futures(self) -> '_FutureMethods':
        """``client.futures.m(...)`` starts the call and returns a ``Future``."""
        return _FutureMethods(self)

    def call(self, method: str, *args, **kwargs) -> Any:
        request = serialization.dumps((method, args, kwargs))
        try:
            reply = self._stub(request, timeout=self._timeout, wait_for_ready=self._wait_for_ready)
        except grpc.RpcError as exc:
            raise errors.translate_rpc_error(exc, self._address, method) from None
        return _decode_reply(reply)

    def call_future(self, method: str, *args, **kwargs) -> concurrent.futures.Future:
        request = serialization.dumps((method, args, kwargs))
        result: concurrent.futures.Future = concurrent.futures.Future()
        call = self._stub.future(request, timeout=self._timeout, wait_for_ready=self._wait_for_ready)

        def finish(done) -> None:
            try:
                result.set_result(_decode_reply(done.result()))
            except grpc.RpcError as exc:
                result.set_exception(errors.translate_rpc_error(exc, self._address, method))
            except BaseException as exc:  # The remote exception, rebuilt.
                result.set_exception(exc)

        call.add_done_callback(finish)
        return result

    def list_methods(self) -> list[str]:
        stub = _channel(self._address).unary_unary(wire.LIST_METHODS)
        try:
            reply = stub(b'', timeout=self._timeout, wait_for_ready=self._wait_for_ready)
        except grpc.RpcError as exc:
            raise errors.translate_rpc_error(exc, self._address, 'list_methods') from None
        return serialization.loads(reply)

    def __call__(self, *args, **kwargs) -> Any:
        return self.call('__call__', *args, **kwargs)

    def __getattr__(self, name: str):
        # Private names stay local so tools that probe objects (pickle, numpy,
        # IPython's _repr_html_) never turn into remote calls.
        if name.startswith('_'):
            raise AttributeError(name)
        return _Method(self, name)

    def __reduce__(self):
        return (_rebuild_client, (self._address, self._timeout, self._wait_for_ready))

    def __repr__(self) -> str:
        return f'courier.Client({self._address!r})'


def _rebuild_client(address: str, timeout: float | None, wait_for_ready: bool) -> Client:
    return Client(address, timeout=timeout, wait_for_ready=wait_for_ready)


class _Method:
    __slots__ = ('_client', '_name')

    def __init__(self, client: Client, name: str):
        self._client, self._name = client, name

    def __call__(self, *args, **kwargs) -> Any:
        return self._client.call(self._name, *args, **kwargs)


class _FutureMethods:
    __slots__ = ('_client',)

    def __init__(self, client: Client):
        self._client = client

    def __getattr__(self, name: str):
        if name.startswith('_') and name != '__call__':
            raise AttributeError(name)
        return lambda *args, **kwargs: self._client.call_future(name, *args, **kwargs)


def list_methods(client: Client) -> list[str]:
    """The public methods the client's server offers."""
    return client.list_methods()
