"""Serves the public methods of any Python object over every courier transport.

    server = courier.Server(Counter(), port=0)
    server.start()            # server.address == '127.0.0.1:PORT'

Public means: a name from ``dir()`` (or reachable with ``getattr``, so
delegating wrappers work) that does not start with ``_`` and is not ``run``,
whose value is callable; plus ``__call__`` when the object itself is callable.
A method defined on the object's class is looked up once and kept (see ``_Served``).

The server listens on every transport of ``transports/registry.py`` that
applies: gRPC on the address's port; a Unix socket when bound to loopback
(see ``transports/uds.py``), which clients on this host use automatically; raw
TCP on the same interface (see ``transports/tcp.py``), the fast path from
other hosts.
At most ``thread_pool_size`` calls run at once, whichever path they came by.

With a secret (``secret=`` or the process default, see ``auth.py``), nothing
that arrives by TCP or gRPC is decoded before its sender proved the secret
to this server: proofs are made for its ``identity`` (a launched node's
``label/index``) and for this start of it, so they are worthless at any other
server, and at this one after a restart. Binding anything but loopback
without a secret is refused unless ``insecure=True``.
"""

from __future__ import annotations

import concurrent.futures
import queue
import time
import types
from typing import Any, Callable

from launchpad_py.courier import auth, errors, frames, messages, serialization, stats, stop_gate
from launchpad_py.courier.transports import grpc_chunks, interface, registry, tcp
from launchpad_py.courier.transports import tls as tls_module

_clock = time.perf_counter
_loads = serialization.plain_loads

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
    if '__call__' in dir(obj):  # Not callable(): a stand-in for the object must not count.
        names.append('__call__')
    return sorted(names)


class Server:
    """A server for one object; calls run on a bounded thread pool.

    ``host`` is the interface to bind (never all of them unless asked).
    ``secret``: the bytes callers must prove (default: the one registered for
    ``host:port``, else the process default); ``insecure=True`` allows a
    non-loopback bind without one, meaning anyone who can reach the port runs
    code here. ``local_transport=False`` turns the same-host socket off,
    ``tcp_transport=False`` the raw-TCP listener; ``max_message_bytes`` is
    the largest single gRPC message (bigger replies are streamed in chunks);
    ``handshake_timeout`` closes TCP connections that do not authenticate in
    time, and gRPC connections that do not finish theirs; ``idle_timeout``
    closes gRPC connections without a call for that long (clients reconnect);
    ``max_frame_bytes`` is the largest TCP frame accepted; ``tls``
    (``TlsCredentials``) encrypts gRPC and raw TCP (see ``transports/tls.py``).
    ``identity`` names the server in its proofs; clients that expect a name
    refuse any other server (launched nodes pass ``label/index``).
    """

    def __init__(self, obj: Any, port: int = 0, *, host: str = '127.0.0.1',
                 thread_pool_size: int = 16, label: str | None = None,
                 thread_initializer: Callable[[], None] | None = None,
                 local_transport: bool = True,
                 max_message_bytes: int = grpc_chunks.MAX_MESSAGE_BYTES,
                 secret: bytes | None = None, insecure: bool = False,
                 tcp_transport: bool = True,
                 handshake_timeout: float = tcp.HANDSHAKE_SECONDS,
                 max_frame_bytes: int = tcp.MAX_FRAME_BYTES,
                 tls: tls_module.TlsCredentials | None = None,
                 identity: str | None = None,
                 idle_timeout: float = interface.IDLE_SECONDS):
        if not isinstance(thread_pool_size, int) or thread_pool_size < 1:
            raise ValueError(f'thread_pool_size must be a positive int (got {thread_pool_size!r})')
        self._secret = auth.secret_for(f'{host}:{port}' if port else None, secret)
        if self._secret is None and not insecure and not is_loopback(host):
            raise ValueError(
                f'courier server {label or "(unlabelled)"} refuses to bind {host!r} without a '
                'secret: anyone who reaches that address could run code in this process. Pass '
                'secret=secrets.token_bytes(32) (clients pass the same), call '
                'courier.set_default_secret(...), or insecure=True if the network is trusted')
        self._name = auth.check_name(identity, f'identity of courier server {label or ""}')
        self._identity: auth.Identity | None = None
        self._options = interface.ServerOptions(
            local_transport, tcp_transport, tls, handshake_timeout, idle_timeout,
            max_frame_bytes, grpc_chunks.check_limit(max_message_bytes))
        self._listeners: dict[str, interface.Listener] = {}
        self._served = _Served(obj)
        self._host = host
        self._requested_port = port
        self._label = label
        self._initializer = thread_initializer
        self._pool_size = thread_pool_size
        # Permits: one token per call that may run; a queue of them costs a tenth of a semaphore.
        permits: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(thread_pool_size):
            permits.put(None)
        self._permits = permits
        self._take_permit, self._return_permit = permits.get, permits.put
        self._pool = concurrent.futures.ThreadPoolExecutor(
            thread_pool_size, thread_name_prefix=f'courier-{label or "server"}',
            initializer=thread_initializer)  # E.g. to tell handler threads which node they serve.
        self._port: int | None = None
        #: Calls served, in flight, latency and bytes per method (see ``stats.py``).
        self.stats = stats.ServerStats(label, self._calls_running)

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError('the server is not started; call start() first')
        return self._port

    @property
    def address(self) -> str:
        return f'{self._host}:{self.port}'

    @property
    def local_path(self) -> str | None:
        """The Unix socket clients on this host use, or None when there is none."""
        local = self._listeners.get(registry.UNIX.name)
        return local.path if local is not None else None

    @property
    def tcp_port(self) -> int | None:
        """The raw-TCP listener's port, or None when there is none."""
        listener = self._listeners.get(registry.TCP.name)
        return listener.port if listener is not None else None

    def start(self) -> 'Server':
        """Binds every transport that applies (the address's first), then serves on all."""
        self._identity = auth.Identity.fresh(self._secret, self._name)
        serving = interface.Serving(
            self._host, self._requested_port, self._label, self._identity, self._secret,
            self._dispatch_frame, self._unsendable, self._pool, self._initializer, self.stats,
            lambda: public_methods(self._served.obj), lambda: self.tcp_port or 0, self._options)
        listeners: dict[str, interface.Listener] = {}
        try:
            for transport in registry.ALL:
                listener = transport.listen(serving)
                if listener is not None:
                    listeners[transport.name] = listener
                if transport is registry.ADDRESS:
                    serving.port = listener.port
        except BaseException:
            for listener in listeners.values():
                listener.stop()
            raise
        for listener in reversed(listeners.values()):  # The address's last: it names the others.
            listener.start()
        self._listeners, self._port = listeners, serving.port
        stats.register(self.stats)
        return self

    def stop(self, grace: float | None = None) -> None:
        stats.unregister(self.stats)
        listeners, self._listeners = self._listeners, {}
        with stop_gate.turn():  # Thousands of servers stopping at once: a few at a time.
            for name in reversed(listeners):  # The faster paths first, as before.
                listeners[name].stop(grace)
            if listeners:  # Cached client channels of this process would never see it go.
                registry.forget(self._host, self._port)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def replace_object(self, obj: Any) -> None:
        """Serves ``obj`` from the next call on.

        A launched node serves a stand-in while its constructor runs (calls wait
        for the object) and hands the built object over here: every call then
        resolves its method on the object itself, without the stand-in's Python
        ``__getattr__`` (a tenth of a tiny call's server-side Python).
        """
        self._served = _Served(obj)  # One store: a call sees the old object or the new.

    def __enter__(self) -> 'Server':
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def _resolve(self, name: str, served: '_Served'):
        """The callable ``name`` names on ``served.obj``, kept in ``served.methods`` when
        ``served.keeps`` says a later call may reuse it."""
        obj = served.obj
        if name == '__call__' and '__call__' in dir(obj):
            return obj
        if not name.startswith('_') and name != 'run':
            try:
                attr = getattr(obj, name)
            except AttributeError:
                attr = None
            if callable(attr):
                if served.keeps(name, attr):
                    served.methods[name] = attr
                return attr
        available = ', '.join(public_methods(obj)) or '(none)'
        raise errors.UnknownMethodError(
            f'{obj.__class__.__name__} served by {self._label or "this server"} has no '
            f'public method {name!r}; available: {available}')

    def _dispatch_frame(self, frame: frames.Frame, shard: stats.Shard | None = None) -> tuple:
        """Runs one request: ``('ok', value)`` or ``('error', RemoteFailure)``.

        ``shard``: the calling thread's counters, where the caller holds them.
        """
        self._take_permit()
        ok = False
        start = _clock()
        try:
            if serialization.device_decodes:  # Another thread decodes device arrays now.
                frame.method, args, kwargs = frame.value()
            else:  # ``frame.value()``'s common case, two Python calls less per request.
                frame.method, args, kwargs = _loads(frame.pickled, buffers=frame.buffers)
            served = self._served
            method = served.methods.get(frame.method)
            if method is None or frame.method in served.own:  # ``_Served`` says why.
                method = self._resolve(frame.method, served)
            reply = 'ok', method(*args, **kwargs)
            ok = True
            return reply
        except Exception as exc:  # Every failure travels back to the caller.
            return 'error', messages.RemoteFailure.capture(exc, self._label, frame.method)
        finally:
            self._return_permit(None)
            size = len(frame.pickled)
            if frame.buffers:
                size += stats.buffer_bytes(frame.buffers)
            (shard or self.stats.shard()).count(frame.method, start, size, ok)

    def _calls_running(self) -> int:
        # Every call holds a permit while it runs, so the permits in use are the calls in
        # flight, and counting them costs the hot path nothing.
        return self._pool_size - self._permits.qsize()

    def _unsendable(self, frame: frames.Frame, exc: Exception) -> tuple:
        """The reply for a result that cannot be serialized: the caller learns why."""
        return 'error', messages.RemoteFailure.capture(exc, self._label, frame.method)


class _Served:
    """The served object and the methods its calls resolved, kept for the next calls.

    Looking a method up is four Python calls per request; the original courier binds
    every method once at start. Kept is only what a later lookup would find again: a
    method defined on the object's class (bound to the object itself), of a class that
    resolves attributes the ordinary way (no ``__getattr__``, no ``__getattribute__``:
    a delegating wrapper or a launched node's stand-in is asked every time). An
    attribute later set on the object itself is still seen, since each call checks
    ``own`` (the object's ``__dict__``) first; a method replaced *on the class* after
    its first call is not. ``Server.replace_object`` starts a new ``_Served``.
    """

    __slots__ = ('obj', 'methods', 'own', '_plain')

    def __init__(self, obj: Any):
        self.obj = obj
        self.methods: dict[str, Any] = {}
        self.own = getattr(obj, '__dict__', None)
        if not isinstance(self.own, dict):  # No instance attributes (``__slots__``), or a proxy.
            self.own = {}
        cls = type(obj)
        self._plain = (cls.__getattribute__ is object.__getattribute__
                       and not hasattr(cls, '__getattr__'))

    def keeps(self, name: str, attr: Any) -> bool:
        """Whether ``attr``, just found as ``obj.name``, is the class's method ``name``."""
        return (self._plain and name not in self.own and isinstance(attr, types.MethodType)
                and attr.__self__ is self.obj
                and getattr(type(self.obj), name, None) is attr.__func__)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback (reachable from no other host)."""
    return host.strip('[]') in ('localhost', '::1') or host.startswith('127.')
