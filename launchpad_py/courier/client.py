"""Calls the methods of an object served by a courier ``Server``.

    client = courier.Client('127.0.0.1:5000', call_timeout=10)
    client.add(1, 2)                      # synchronous
    future = client.futures.add(1, 2)     # concurrent.futures.Future
    courier.list_methods(client)          # ['add', ...]

A client takes the first transport of ``transports/registry.py`` that
reaches its server: on this host's loopback its Unix socket (large arrays
through shared memory), falling back to gRPC whenever that socket is not
there; on another host raw TCP (see ``transports/tcp.py``).
``transport='grpc'`` or ``'tcp'`` forces one. Channels and
connections are shared per address within a process, so many clients of one
server cost one.

Over TCP and gRPC the client proves the secret (``secret=``, else the one
registered for the address, else the process default; see ``auth.py``) to
the server it meant to reach: with ``server_identity`` (a node's handle
passes the node's ``label/index``) it refuses any other server before
sending it anything. A pickled client carries no secret: it uses the
receiving process's.

A server may come back elsewhere (a restarted node on another port or host):
``relocate`` (given the failed address, returns the current one) is asked
before the call that follows a ``CourierUnavailableError``, so the caller sees
that one failed call and the next goes to the new address. A client made from
a string that this process knows as a node's address (the launching process:
every node's; a node: those of its handles) gets that node's ``relocate`` from
the program layer (``follow_known_addresses``); any other string never moves.
"""

from __future__ import annotations

import concurrent.futures
from concurrent.futures import _base
import datetime
import functools
import itertools
import logging
import time
from typing import TYPE_CHECKING, Any, Callable

from launchpad_py.courier import auth, errors, fail_fast, frames, serialization
from launchpad_py.courier.transports import grpc_chunks, interface, registry
from launchpad_py.courier.transports.sockets import socket_channel
from launchpad_py.courier.transports.tls import TlsCredentials

if TYPE_CHECKING:  # Loaded by the first gRPC call, not here (see transports/registry.py).
    from launchpad_py.courier.transports import grpc_client

Timeout = float | int | datetime.timedelta | None
# A Future's states in which ``done()`` is true.
_DONE = frozenset({_base.CANCELLED, _base.CANCELLED_AND_NOTIFIED, _base.FINISHED})
TRANSPORTS = registry.CHOICES

def _seconds(timeout: Timeout) -> float | None:
    """Falsy means no deadline; timedelta, int and float are accepted."""
    if not timeout:
        return None
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    if isinstance(timeout, (int, float)):
        return float(timeout)
    raise TypeError(f'timeout must be a float, int or timedelta (got {timeout!r})')


#: A reply's value, or its remote exception raised (see ``serialization.decode_reply``).
decode_reply = serialization.decode_reply


#: Set by the program layer: for a ``host:port`` this process knows as a node's address,
#: the ``relocate`` that follows that node; None for any other. Courier knows no programs.
_known_address_follower: Callable[[str], Callable[[str], str] | None] | None = None


def follow_known_addresses(follower: Callable[[str], Callable[[str], str] | None]) -> None:
    """Clients made from a string ``follower`` recognizes follow that server's moves."""
    global _known_address_follower
    _known_address_follower = follower


#: The failures after which a client that can follow its server asks where it is before the
#: next call. A timeout too: a moved server's old address may accept and answer nothing (a
#: pod whose network went without a reset), and a client retrying on timeouts then waited
#: there for ever (podman fault run 12, stop 38). Asked at an address still current, the
#: launcher answers it after a short grace (``Directory.relocate``).
_ASK_AGAIN = (errors.CourierUnavailableError, errors.CourierTimeoutError)

_log = logging.getLogger('launchpad_py.courier')
#: A call without a deadline whose handshake timed out dials again after these pauses
#: (seconds; the last repeats): 1,000 clients dialling one server at once on a loaded
#: machine (issue 25's fan-in over ssh, load 90 on 2 cores) wait their turn, not fail.
_HANDSHAKE_PAUSES = (0.1, 0.3, 1.0, 3.0)


class Client:
    """A proxy whose attribute calls run on the remote object.

    The positional parameters are the original Launchpad's. ``call_timeout``
    (or its alias ``timeout``) bounds each call; ``compress`` is accepted and
    ignored: the transport picks how payloads travel. ``device_arrays=True``
    turns JAX arrays in replies back into JAX arrays (by default they arrive
    as numpy arrays). ``secret``: the bytes to prove to the server (default:
    registered for the address, else the process's); ``tls``: the server's
    ``TlsCredentials``, to encrypt TCP and gRPC; ``server_identity``: the name
    the server must prove (its ``identity``), None for any; ``relocate``:
    where the server went after a call to it failed unavailable (see above).
    """

    def __init__(self, server_address: str, compress: bool = False,
                 call_timeout: Timeout = None, wait_for_ready: bool = True, *,
                 timeout: Timeout = None, transport: str = 'auto', device_arrays: bool = False,
                 max_message_bytes: int = grpc_chunks.MAX_MESSAGE_BYTES,
                 secret: bytes | None = None, tls: TlsCredentials | None = None,
                 server_identity: str | None = None,
                 relocate: Callable[[str], str] | None = None):
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
        self._timeout = _seconds(timeout)
        self._wait_for_ready = wait_for_ready
        self._transport = transport
        self._device_arrays = device_arrays
        self._max_message_bytes = max_message_bytes
        self._explicit_secret, self._tls = secret, tls
        self._expected = server_identity
        if server_identity is not None:
            auth.check_name(server_identity, 'server_identity')
        if relocate is None and _known_address_follower is not None:
            relocate = _known_address_follower(address)
        self._relocate = relocate
        self._stale = False  # A call failed unavailable or timed out: ask ``relocate`` first.
        self._last_future: concurrent.futures.Future | None = None
        self._connect(address)
        self._decode = functools.partial(decode_reply, device_arrays=True) \
            if device_arrays else decode_reply
        self._futures = _FutureMethods(self)

    def _connect(self, address: str) -> None:
        """Dials ``address`` (the secret registered for it: a moved server's own)."""
        self._address = address
        self._secret = auth.secret_for(address, self._explicit_secret)
        self._dial = interface.Dial(address, self._secret, self._timeout, self._wait_for_ready,
                                    self._tls, self._expected, self._max_message_bytes)
        # The fastest path that reaches the server (None: gRPC only).
        self._local = registry.dial(self._transport, self._dial)
        self._grpc_caller: grpc_client.GrpcCaller | None = None

    def _move(self) -> None:
        """After a failed call: dials where ``relocate`` says the server is now."""
        old = self._address
        try:
            new = self._relocate(old)
        except Exception as exc:  # The program's own error (e.g. it stopped), as a courier one.
            raise errors.CourierUnavailableError(
                f'the server that was at {old} cannot be found again: {exc}') from exc
        self._stale = False
        if new != old:
            host, _, port = old.rpartition(':')
            registry.forget(host, int(port))  # Its cached channels lead nowhere now.
            self._connect(new)

    def _check_stale(self) -> None:
        """Moves first if the last call failed unavailable; a future's failure counts
        even when its callback has not run yet (its caller may wake first)."""
        last = self._last_future
        # Its state read, not ``done()``: a socket future asked ``done()`` would have its
        # reply delivered by its connection's background thread (see call_future.py).
        if last is not None and last._state in _DONE:
            self._last_future = None
            if last._exception is not None:
                self._note_failure(last)
        if self._stale:
            self._move()

    def _note_failure(self, future: concurrent.futures.Future) -> None:
        # Read from the done future's fields (a result or a cancellation leaves _exception
        # None): _check_stale looks at the last future of every call.
        exc = future._exception
        if exc is None or getattr(future, '_lp_noted', False):  # Seen already (callback or call).
            return
        future._lp_noted = True  # type: ignore[attr-defined]
        if isinstance(exc, _ASK_AGAIN):
            self._stale = True

    @property
    def _grpc(self) -> grpc_client.GrpcCaller:
        # Made on first use: a client that only ever talks locally opens no gRPC channel.
        if self._grpc_caller is None:
            self._grpc_caller = registry.ADDRESS.dial(self._dial)
        return self._grpc_caller

    @property
    def address(self) -> str:
        return self._address

    @property
    def futures(self) -> '_FutureMethods':
        """``client.futures.m(...)`` starts the call and returns a ``Future``."""
        return self._futures

    def call(self, method: str, *args, **kwargs) -> Any:
        if self._relocate is not None:
            last = self._last_future  # As in call_future.
            if self._stale or (last is not None and last._state in _DONE):
                self._check_stale()
        request = (method, args, kwargs)
        try:
            if self._local is not None:
                value = self._local.call(request, self._timeout, self._decode)
                if value is not socket_channel.NO_SOCKET:
                    return value
            return self._grpc.call(request, self._decode)
        except _ASK_AGAIN as exc:
            if self._may_dial_again(exc):
                return self._dial_again(functools.partial(self._send, request))
            self._stale = self._relocate is not None
            raise

    def _send(self, request: tuple) -> Any:
        """``call``'s sending, for ``_dial_again`` (``call`` has it inline: one Python call
        less per call)."""
        if self._local is not None:
            value = self._local.call(request, self._timeout, self._decode)
            if value is not socket_channel.NO_SOCKET:
                return value
        return self._grpc.call(request, self._decode)

    def _may_dial_again(self, exc: BaseException) -> bool:
        """Whether a failed call is one to make again: its handshake timed out, it has no
        deadline (one with a deadline keeps it), and the program is not stopping (its
        servers' addresses then fail fast)."""
        return (isinstance(exc, errors.HandshakeTimeoutError) and self._timeout is None
                and not fail_fast.applies(self._address))

    def _dial_again(self, send: Callable[[], Any]) -> Any:
        """``send()`` again after growing pauses while its handshakes time out. A client
        that can follow its server asks where it is first: a moved server's old address
        may accept and answer nothing (see ``_ASK_AGAIN``), and ``relocate`` then says
        where it went, or raises once its program ended."""
        for attempt in itertools.count():
            pause = _HANDSHAKE_PAUSES[min(attempt, len(_HANDSHAKE_PAUSES) - 1)]
            _log.info('courier client of %s: handshake timed out; dialling again in %g s '
                      '(attempt %d)', self._address, pause, attempt + 2)
            time.sleep(pause)  # A pause between tries, not a wait for an event.
            if self._relocate is not None:
                self._stale = True
                self._move()
            try:
                return send()
            except _ASK_AGAIN as exc:
                if not self._may_dial_again(exc):
                    self._stale = self._relocate is not None
                    raise

    def call_future(self, method: str, *args, **kwargs) -> concurrent.futures.Future:
        if self._relocate is not None:
            last = self._last_future  # _check_stale's "nothing to do" inline: once per call.
            if self._stale or (last is not None and last._state in _DONE):
                self._check_stale()
        request = (method, args, kwargs)
        # Not a done-callback where the future offers a quieter hook: a callback makes a
        # future "observed", and its reply would then be read by the connection's background
        # thread instead of the caller waiting in result(). A socket future takes the hook
        # when it is made; a gRPC one gets the callback below.
        hook = None if self._relocate is None else self._note_failure
        try:
            try:  # _start_future's socket path inline: one Python call less per call.
                future = socket_channel.NO_SOCKET if self._local is None else \
                    self._local.call_future(request, self._timeout, self._decode, hook)
                if future is socket_channel.NO_SOCKET:
                    future = self._start_future(request, hook)
            except _ASK_AGAIN as exc:  # Failed before it started (asking who the server is,
                if not self._may_dial_again(exc):  # at a gone or silent address; or its
                    self._stale = self._relocate is not None  # handshake).
                    raise
                future = self._dial_again(functools.partial(self._start_future, request, hook))
        except errors.CourierError as exc:
            # The future carries it: a caller of futures handles failures in one place
            # (result(), exception(), wait), whether the call failed before or after it
            # started (an elastic member that left fails either way).
            future = concurrent.futures.Future()
            future.set_exception(exc)
        if hook is not None:
            self._last_future = future
        return future

    def _start_future(self, request: tuple, hook: Callable | None) -> concurrent.futures.Future:
        future = socket_channel.NO_SOCKET
        if self._local is not None:
            future = self._local.call_future(request, self._timeout, self._decode, hook)
        if future is socket_channel.NO_SOCKET:
            future = self._grpc.call_future(request, self._decode)
            if hook is not None:
                future.add_done_callback(hook)
        return future

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
                                  self._expected, self._relocate))

    def __repr__(self) -> str:
        return f'courier.Client({self._address!r})'


def _rebuild_client(address, timeout, wait_for_ready, transport='auto', device_arrays=False,
                    max_message_bytes=grpc_chunks.MAX_MESSAGE_BYTES,
                    server_identity=None, relocate=None) -> Client:
    return Client(address, timeout=timeout, wait_for_ready=wait_for_ready, transport=transport,
                  device_arrays=device_arrays, max_message_bytes=max_message_bytes,
                  server_identity=server_identity, relocate=relocate)


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
