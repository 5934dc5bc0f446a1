"""Calls the methods of an object served by a courier ``Server``.

    client = courier.Client('127.0.0.1:5000', call_timeout=10)
    client.add(1, 2)                      # synchronous
    future = client.futures.add(1, 2)     # concurrent.futures.Future
    courier.list_methods(client)          # ['add', ...]

A client of a server on this host's loopback talks over its Unix socket
(large arrays through shared memory) and falls back to gRPC whenever that
socket is not there; a client of a server on another host talks raw TCP
(see ``tcp.py``). ``transport='grpc'`` or ``'tcp'`` forces one. Channels and
connections are shared per address within a process, so many clients of one
server cost one.

Over TCP and gRPC the client proves the secret (``secret=``, else the one
registered for the address, else the process default; see ``auth.py``) to
the server it meant to reach: with ``server_identity`` (a node's handle
passes the node's ``label/index``) it refuses any other server before
sending it anything. A pickled client carries no secret: it uses the
receiving process's.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import functools
import threading
from typing import Any

from launchpad_py.courier import (auth, errors, frames, grpc_client, grpc_chunks, serialization,
                                  socket_channel, tcp, uds)
from launchpad_py.courier.tls import TlsCredentials

Timeout = float | int | datetime.timedelta | None
TRANSPORTS = ('auto', 'grpc', 'tcp')

_channels: dict[tuple, socket_channel.SocketChannel] = {}
_channels_lock = threading.Lock()


def close_channels_to(host: str, port: int) -> None:
    """Closes this process's cached connections to the server at ``host:port``, which stopped.

    A channel's reader thread sleeps while no call is pending, so it would never
    see its server go: without this, every program run in one process (threads,
    or a launcher's own clients) leaves a thread and a socket per server behind.
    A client used again later reconnects.
    """
    address = f'{host}:{port}'
    local = host in uds.LOOPBACK_HOSTS
    with _channels_lock:
        gone = [key for key in _channels if key[1] == address
                or (local and uds.local_port(key[1]) == port)]
        channels = [_channels.pop(key) for key in gone]
    for channel in channels:
        channel.close()


def _local_channel(address: str) -> socket_channel.SocketChannel | None:
    port = uds.local_port(address)
    if port is None:
        return None
    with _channels_lock:
        channel = _channels.get(('unix', address))
        if channel is None:
            channel = _channels[('unix', address)] = socket_channel.SocketChannel(
                address, functools.partial(uds.connect, port))
        return channel


def _tcp_channel(address: str, secret: bytes | None, wait_for_ready: bool,
                 timeout: float | None, tls: TlsCredentials | None,
                 expected: str | None) -> socket_channel.SocketChannel:
    key = ('tcp', address, secret, tls, expected)
    with _channels_lock:
        channel = _channels.get(key)
        if channel is None:
            finder = _TcpPort(address, secret, wait_for_ready, timeout, tls, expected)
            channel = _channels[key] = socket_channel.SocketChannel(address, finder.connect)
        return channel


class _TcpPort:
    """Finds a server's raw-TCP port (one gRPC call, kept) and connects to it."""

    def __init__(self, address: str, secret: bytes | None, wait_for_ready: bool,
                 timeout: float | None, tls: TlsCredentials | None, expected: str | None):
        self._address = address
        self._expected = expected
        self._host = address.rpartition(':')[0].strip('[]')
        self._secret = secret
        self._tls = None if tls is None else tls.client_context()
        self._grpc = grpc_client.GrpcCaller(address, timeout, wait_for_ready,
                                            grpc_chunks.MAX_MESSAGE_BYTES, secret, tls, expected)
        self._port: int | None = None

    def connect(self, timeout: float | None) -> tcp.Connection | None:
        """A new connection; None when the server has no raw-TCP listener (use gRPC)."""
        fresh = self._port is None
        if fresh:
            self._port = self._grpc.tcp_port()
        if not self._port:
            return None
        try:
            return tcp.connect(self._host, self._port, self._secret, self._address, timeout,
                               self._tls, self._expected)
        except errors.CourierUnavailableError:
            if fresh:
                raise
        self._port = self._grpc.tcp_port()  # The cached port may be a restarted server's.
        if not self._port:
            return None
        return tcp.connect(self._host, self._port, self._secret, self._address, timeout,
                           self._tls, self._expected)


def _seconds(timeout: Timeout) -> float | None:
    """Falsy means no deadline; timedelta, int and float are accepted."""
    if not timeout:
        return None
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    if isinstance(timeout, (int, float)):
        return float(timeout)
    raise TypeError(f'timeout must be a float, int or timedelta (got {timeout!r})')


def decode_reply(frame: frames.Frame, device_arrays: bool = False) -> Any:
    """The call's value, or its remote exception raised here."""
    status, value = serialization.decode(frame.pickled, frame.buffers, device_arrays=device_arrays)
    if status == 'ok':
        return value
    raise value.rebuild()


class Client:
    """A proxy whose attribute calls run on the remote object.

    The positional parameters are the original Launchpad's. ``call_timeout``
    (or its alias ``timeout``) bounds each call; ``compress`` is accepted and
    ignored: the transport picks how payloads travel. ``device_arrays=True``
    turns JAX arrays in replies back into JAX arrays (by default they arrive
    as numpy arrays). ``secret``: the bytes to prove to the server (default:
    registered for the address, else the process's); ``tls``: the server's
    ``TlsCredentials``, to encrypt TCP and gRPC; ``server_identity``: the name
    the server must prove (its ``identity``), None for any.
    """

    def __init__(self, server_address: str, compress: bool = False,
                 call_timeout: Timeout = None, wait_for_ready: bool = True, *,
                 timeout: Timeout = None, transport: str = 'auto', device_arrays: bool = False,
                 max_message_bytes: int = grpc_chunks.MAX_MESSAGE_BYTES,
                 secret: bytes | None = None, tls: TlsCredentials | None = None,
                 server_identity: str | None = None):
        del compress
        address = server_address
        if call_timeout is not None and timeout is not None:
            raise TypeError(f'pass call_timeout or its alias timeout, not both '
                            f'(got call_timeout={call_timeout!r}, timeout={timeout!r})')
        timeout = timeout if call_timeout is None else call_timeout
        if not isinstance(address, str) or ':' not in address:
            raise ValueError(f"address must be 'host:port' (got {address!r})")
        if transport not in TRANSPORTS:
            raise ValueError(f'transport must be one of {TRANSPORTS} (got {transport!r})')
        self._address = address
        self._timeout = _seconds(timeout)
        self._wait_for_ready = wait_for_ready
        self._transport = transport
        self._device_arrays = device_arrays
        self._max_message_bytes = max_message_bytes
        self._secret = auth.secret_for(address, secret)
        self._tls = tls
        self._expected = server_identity
        if server_identity is not None:
            auth.check_name(server_identity, 'server_identity')
        self._local = _local_channel(address) if transport == 'auto' else None
        if transport == 'tcp' or (transport == 'auto' and self._local is None):
            self._local = _tcp_channel(address, self._secret, wait_for_ready, self._timeout, tls,
                                       server_identity)
        self._grpc_caller: grpc_client.GrpcCaller | None = None
        self._decode = functools.partial(decode_reply, device_arrays=device_arrays)
        self._futures = _FutureMethods(self)

    @property
    def _grpc(self) -> grpc_client.GrpcCaller:
        # Made on first use: a client that only ever talks locally opens no gRPC channel.
        if self._grpc_caller is None:
            self._grpc_caller = grpc_client.GrpcCaller(
                self._address, self._timeout, self._wait_for_ready, self._max_message_bytes,
                self._secret, self._tls, self._expected)
        return self._grpc_caller

    @property
    def address(self) -> str:
        return self._address

    @property
    def futures(self) -> '_FutureMethods':
        """``client.futures.m(...)`` starts the call and returns a ``Future``."""
        return self._futures

    def call(self, method: str, *args, **kwargs) -> Any:
        request = (method, args, kwargs)
        if self._local is not None:
            value = self._local.call(request, self._timeout, self._decode)
            if value is not socket_channel.NO_SOCKET:
                return value
        return self._grpc.call(request, self._decode)

    def call_future(self, method: str, *args, **kwargs) -> concurrent.futures.Future:
        request = (method, args, kwargs)
        if self._local is not None:
            future = self._local.call_future(request, self._timeout, self._decode)
            if future is not socket_channel.NO_SOCKET:
                return future
        return self._grpc.call_future(request, self._decode)

    def list_methods(self) -> list[str]:
        return self._grpc.list_methods()

    def __call__(self, *args, **kwargs) -> Any:
        return self.call('__call__', *args, **kwargs)

    def __getattr__(self, name: str):
        # Private names stay local so tools that probe objects (pickle, numpy,
        # IPython's _repr_html_) never turn into remote calls.
        if name.startswith('_'):
            raise AttributeError(name)
        method = self.__dict__[name] = _Method(self, name)  # Found directly from now on.
        return method

    def __reduce__(self):
        return (_rebuild_client, (self._address, self._timeout, self._wait_for_ready,
                                  self._transport, self._device_arrays, self._max_message_bytes,
                                  self._expected))

    def __repr__(self) -> str:
        return f'courier.Client({self._address!r})'


def _rebuild_client(address, timeout, wait_for_ready, transport='auto', device_arrays=False,
                    max_message_bytes=grpc_chunks.MAX_MESSAGE_BYTES,
                    server_identity=None) -> Client:
    return Client(address, timeout=timeout, wait_for_ready=wait_for_ready, transport=transport,
                  device_arrays=device_arrays, max_message_bytes=max_message_bytes,
                  server_identity=server_identity)


class _Method:
    __slots__ = ('_client', '_name')

    def __init__(self, client: Client, name: str):
        self._client, self._name = client, name

    def __call__(self, *args, **kwargs) -> Any:
        return self._client.call(self._name, *args, **kwargs)


class _FutureMethods:
    def __init__(self, client: Client):
        self._client = client

    def __getattr__(self, name: str):
        if name.startswith('_') and name != '__call__':
            raise AttributeError(name)
        method = functools.partial(self._client.call_future, name)
        if name != '__call__':
            self.__dict__[name] = method  # Found directly from now on.
        return method


def list_methods(client: Client) -> list[str]:
    """The public methods the client's server offers."""
    return client.list_methods()
