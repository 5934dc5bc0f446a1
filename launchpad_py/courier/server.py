"""Serves the public methods of any Python object over gRPC (and a same-host socket).

    server = courier.Server(Counter(), port=0)
    server.start()            # server.address == '127.0.0.1:PORT'

Public means: a name from ``dir()`` (or reachable with ``getattr``, so
delegating wrappers work) that does not start with ``_`` and is not ``run``,
whose value is callable; plus ``__call__`` when the object itself is callable.

A server bound to loopback also listens on a Unix socket (see ``uds.py``);
clients on this host use it automatically. Every server also listens on raw
TCP on the same interface (see ``tcp.py``), the fast path from other hosts.
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
import logging
import queue
import time
from typing import Any, Callable

import grpc

from launchpad_py.courier import (auth, client, errors, frames, grpc_chunks, messages, stats, tcp,
                                  uds, uds_server)
from launchpad_py.courier import tls as tls_module

_log = logging.getLogger('launchpad_py.courier')
_clock = time.perf_counter

# A gRPC connection with no call in flight for this long is closed (the client reconnects
# on its next call): strangers cannot hold connections open, as on the raw-TCP port.
IDLE_SECONDS = 60.0
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
    (``TlsCredentials``) encrypts gRPC and raw TCP (see ``tls.py``).
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
                 identity: str | None = None, idle_timeout: float = IDLE_SECONDS):
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
        self._tcp_transport = tcp_transport
        self._tls = tls
        self._handshake_timeout = handshake_timeout
        self._idle_timeout = idle_timeout
        self._max_frame_bytes = max_frame_bytes
        self._tcp: tcp.TcpListener | None = None
        self._obj = obj
        self._host = host
        self._requested_port = port
        self._label = label
        self._local_transport = local_transport
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
        self._chunks = grpc_chunks.ReplyStash(max_message_bytes)
        self._server: grpc.Server | None = None
        self._local: uds_server.LocalListener | None = None
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
        return self._local.path if self._local is not None else None

    @property
    def tcp_port(self) -> int | None:
        """The raw-TCP listener's port, or None when there is none."""
        return self._tcp.port if self._tcp is not None else None

    def start(self) -> 'Server':
        # gRPC gets its own threads for the (cheap) chunk transfers; calls take
        # a permit, so thread_pool_size still bounds the calls that run at once.
        self._identity = identity = auth.Identity.fresh(self._secret, self._name)
        interceptors = [] if self._secret is None else [_Guard(identity, self._label)]
        limits = [('grpc.server_handshake_timeout_ms', int(self._handshake_timeout * 1000)),
                  ('grpc.max_connection_idle_ms', int(self._idle_timeout * 1000)),
                  ('grpc.max_allowed_incoming_connections', tcp.MAX_PENDING)]
        server = grpc.server(self._pool, options=GRPC_OPTIONS + limits,
                             maximum_concurrent_rpcs=None, interceptors=interceptors)
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(messages.SERVICE, {
            'Call': grpc.unary_unary_rpc_method_handler(self._handle_call),
            'CallChunked': grpc.stream_unary_rpc_method_handler(self._handle_chunked_call),
            'Fetch': grpc.unary_stream_rpc_method_handler(self._chunks.fetch),
            'ListMethods': grpc.unary_unary_rpc_method_handler(self._handle_list_methods),
            # Answered from its metadata alone: the request is never read (see _Guard).
            'Endpoints': grpc.stream_unary_rpc_method_handler(self._handle_endpoints),
        })])
        target = f'{self._host}:{self._requested_port}'
        try:
            port = (server.add_insecure_port(target) if self._tls is None else
                    server.add_secure_port(target, self._tls.grpc_server_credentials()))
        except RuntimeError as exc:
            port, cause = 0, exc
        else:
            cause = None
        if not port:
            raise errors.CourierError(
                f'courier server {self._label or ""} could not bind {target}: '
                'the port is in use or the host is not local') from cause
        if self._local_transport and uds.local_port(f'{self._host}:{port}') is not None:
            self._local = uds_server.LocalListener(port, self._dispatch_frame, self._unsendable,
                                                   self._pool, self._label, self._initializer,
                                                   stats=self.stats)
            if not self._local.start():
                self._local = None
        if self._tcp_transport:
            self._tcp = tcp.TcpListener(
                self._host, identity, self._dispatch_frame, self._unsendable, self._pool,
                self._label, self._initializer, handshake_timeout=self._handshake_timeout,
                max_frame_bytes=self._max_frame_bytes,
                tls=None if self._tls is None else self._tls.server_context(),
                stats=self.stats)
            if not self._tcp.start():
                self._tcp = None
        server.start()
        self._server, self._port = server, port
        stats.register(self.stats)
        return self

    def stop(self, grace: float | None = None) -> None:
        stats.unregister(self.stats)
        if self._tcp is not None:
            self._tcp.stop()
            self._tcp = None
        if self._local is not None:
            self._local.stop()
            self._local = None
        if self._server is not None:
            self._server.stop(grace).wait()
            self._server = None
            client.close_channels_to(self._host, self._port)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> 'Server':
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def _resolve(self, name: str):
        if name == '__call__' and '__call__' in dir(self._obj):
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
            f'{self._obj.__class__.__name__} served by {self._label or "this server"} has no '
            f'public method {name!r}; available: {available}')

    def _dispatch_frame(self, frame: frames.Frame, shard: stats.Shard | None = None) -> tuple:
        """Runs one request: ``('ok', value)`` or ``('error', RemoteFailure)``.

        ``shard``: the calling thread's counters, where the caller holds them.
        """
        self._take_permit()
        ok = False
        start = _clock()
        try:
            frame.method, args, kwargs = frame.value()
            reply = 'ok', self._resolve(frame.method)(*args, **kwargs)
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

    def _handle_call(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        # A writable copy, so arrays the method receives behave as on the local path.
        return self._reply(frames.from_bytes(bytearray(request)))

    def _reply(self, frame: frames.Frame) -> bytes:
        try:
            reply = self._chunks.reply(self._dispatch_frame(frame))
        except (TypeError, MemoryError) as exc:
            reply = self._chunks.reply(self._unsendable(frame, exc))
        self.stats.sent(len(reply))  # Counted before it leaves, like the other paths.
        return reply

    def _handle_chunked_call(self, chunks, context: grpc.ServicerContext) -> bytes:
        return self._reply(frames.from_bytes(grpc_chunks.join(chunks)))

    def _handle_list_methods(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        return frames.to_bytes(public_methods(self._obj))

    def _handle_endpoints(self, requests, context: grpc.ServicerContext) -> bytes:
        """Who this server is and its raw-TCP port, MACed over the caller's nonce."""
        reply = auth.hello_reply(self._identity, context.invocation_metadata(),
                                 self.tcp_port or 0)
        if reply is None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f'Endpoints needs a {auth.NONCE_BYTES}-byte {auth.HELLO_KEY} nonce '
                          '(a client of an older launchpad_py?)')
        return reply


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback (reachable from no other host)."""
    return host.strip('[]') in ('localhost', '::1') or host.startswith('127.')


class _Guard(grpc.ServerInterceptor):
    """Refuses a gRPC call without a valid token before its request is read, let alone decoded.

    ``Endpoints`` needs no token: it reads no request and answers with a proof
    (see ``auth.hello_reply``), which is how a client learns whom to make tokens for.
    """

    def __init__(self, identity: auth.Identity, label: str | None):
        self._checker = auth.TokenChecker(identity)
        self._label = label or 'server'

    def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method
        if method == messages.ENDPOINTS:
            return continuation(handler_call_details)
        why, body_digest, proof = self._checker.check(
            method, handler_call_details.invocation_metadata)
        if why is None:
            handler = continuation(handler_call_details)
            if handler is None:
                return None
            return _proving(handler, body_digest, proof,
                            lambda context: self._refuse(context, method, _OTHER_BODY))

        def refuse(requests, context: grpc.ServicerContext):
            self._refuse(context, method, why)

        # A streaming-request handler never reads the request: refused unread.
        return grpc.stream_unary_rpc_method_handler(refuse)

    def _refuse(self, context: grpc.ServicerContext, method: str, why: str) -> None:
        _log.warning('courier server %s: refused a gRPC call of %s from %s: %s',
                     self._label, method, context.peer(), why)
        context.abort(grpc.StatusCode.UNAUTHENTICATED, f'refused: {why}')


_OTHER_BODY = 'the request body is not the one its token was made for'


def _proving(handler: grpc.RpcMethodHandler, body_digest: str, proof: str,
             refuse: Callable) -> grpc.RpcMethodHandler:
    """``handler``, refusing a body other than the token's, then sending the server's proof.

    The body is checked before the handler decodes it: a token taken from a
    caller cannot carry another request (see auth.grpc_token).
    """
    def wrap(behavior, streamed: bool):
        def run(request, context):
            if streamed:
                request = list(request)
            if auth.digest(request if streamed else (request,)) != body_digest:
                refuse(context)
            context.send_initial_metadata(((auth.PROOF_KEY, proof),))
            return behavior(iter(request) if streamed else request, context)
        return run

    kinds = {'unary_unary': False, 'unary_stream': False, 'stream_unary': True,
             'stream_stream': True}
    return handler._replace(**{k: wrap(getattr(handler, k), streamed)
                               for k, streamed in kinds.items() if getattr(handler, k) is not None})
