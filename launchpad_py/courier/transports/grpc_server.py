"""The gRPC listener of a courier server: the path whose port the server's address names.

It serves ``Call`` (one message), ``CallChunked`` (a request larger than one
message), ``Fetch`` (a large reply, pulled in chunks, see ``grpc_chunks.py``),
``ListMethods`` and ``Endpoints`` (who the server is and its raw-TCP port).
With a secret, a ``_Guard`` refuses every call whose token was not made for
this server and this request body before the request is read, let alone
decoded (see ``grpc_tokens.py``); ``Endpoints`` reads no request and answers
with a proof. Connections that stay idle, or do not finish their handshake,
are closed, and their number is capped, as on the raw-TCP port.

Bound to a loopback address, the listener does not create a gRPC server at all until
the first connection arrives: a plain socket holds the port, and gRPC then serves on an
abstract Unix socket behind a relay (``sockets/relay.py``), so a local node that only
same-host peers call (over the Unix socket) never starts gRPC's core and its threads.
Bound to another address literal, gRPC binds at once but starts its serving thread on the
first connection (``sockets/first_connection.py``).
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
from typing import Callable

import grpc

from launchpad_py.courier import auth, errors, frames, messages, open_files
from launchpad_py.courier.transports import grpc_chunks, grpc_tokens, interface, tcp
from launchpad_py.courier.transports.sockets import first_connection, relay

_log = logging.getLogger('launchpad_py.courier')

# A gRPC connection with no call in flight for this long is closed (the client reconnects
# on its next call): strangers cannot hold connections open, as on the raw-TCP port.
IDLE_SECONDS = interface.IDLE_SECONDS
# A gRPC start behind the door that failed (no descriptors) is tried again this much later.
_RETRY_S = 0.2
# Unlimited message sizes; SO_REUSEPORT off so two servers can never silently share a port.
GRPC_OPTIONS = [
    ('grpc.max_send_message_length', -1),
    ('grpc.max_receive_message_length', -1),
    ('grpc.so_reuseport', 0),
]


class GrpcListener:
    """One server's gRPC listener: bound when made, serving from ``start()``."""

    def __init__(self, serving: interface.Serving):
        self._serving = serving
        self._chunks = grpc_chunks.ReplyStash(serving.options.max_message_bytes)
        self._lock = threading.Lock()
        self._started = False
        self._relay: relay.Relay | None = None
        if relay.applies(serving.host):  # gRPC only once someone dials the port.
            self._server = None
            open_files.hold_reserve()
            self._door = self._bind_door()
            self.port = self._door.getsockname()[1]
            self._waiting = self._door.fileno()
            return
        self._door = None
        self._server = self._new_server()
        with first_connection.binding:
            free = first_connection.lowest_free_descriptor()
            self.port = self._bind(f'{serving.host}:{serving.port}')
            # gRPC's listening socket, watched until the first connection (None: start now).
            self._waiting = (first_connection.listening_descriptor(self.port, free)
                             if first_connection.can_wait(serving.host) else None)

    def _new_server(self) -> grpc.Server:
        # gRPC gets its own threads for the (cheap) chunk transfers; calls take
        # a permit, so thread_pool_size still bounds the calls that run at once.
        serving = self._serving
        options = serving.options
        interceptors = ([] if serving.secret is None else
                        [_Guard(serving.identity, serving.label)])
        limits = [('grpc.server_handshake_timeout_ms', int(options.handshake_timeout * 1000)),
                  ('grpc.max_connection_idle_ms', int(options.idle_timeout * 1000)),
                  ('grpc.max_allowed_incoming_connections', tcp.MAX_PENDING)]
        server = grpc.server(serving.pool, options=GRPC_OPTIONS + limits,
                             maximum_concurrent_rpcs=None, interceptors=interceptors)
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
            messages.SERVICE, {
                'Call': grpc.unary_unary_rpc_method_handler(self._handle_call),
                'CallChunked': grpc.stream_unary_rpc_method_handler(self._handle_chunked_call),
                'Fetch': grpc.unary_stream_rpc_method_handler(self._chunks.fetch),
                'ListMethods': grpc.unary_unary_rpc_method_handler(self._handle_list_methods),
                # Answered from its metadata alone: the request is never read (see _Guard).
                'Endpoints': grpc.stream_unary_rpc_method_handler(self._handle_endpoints),
            })])
        return server

    def _bind_door(self):
        serving = self._serving
        try:
            return relay.bind_door(serving.host, serving.port, tcp.BACKLOG)
        except OSError as exc:
            raise errors.CourierError(
                f'courier server {serving.label or ""} could not bind '
                f'{serving.host}:{serving.port}: the port is in use or the host is not local'
            ) from exc

    def _bind(self, target: str) -> int:
        tls = self._serving.options.tls
        try:
            port = (self._server.add_insecure_port(target) if tls is None else
                    self._server.add_secure_port(target, tls.grpc_server_credentials()))
        except RuntimeError as exc:
            port, cause = 0, exc
        else:
            cause = None
        if not port:
            raise errors.CourierError(
                f'courier server {self._serving.label or ""} could not bind {target}: '
                'the port is in use or the host is not local') from cause
        return port

    def start(self) -> None:
        if self._waiting is None:
            self._start_serving()
        else:
            first_connection.watch(self._waiting, self._start_serving)

    def _start_serving(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
            if self._door is not None:  # gRPC behind the door, on an abstract Unix socket.
                try:
                    self._start_behind_door()
                except (OSError, RuntimeError, errors.CourierError) as exc:
                    self._failed_behind_door(exc)
                return
            self._server.start()

    def _start_behind_door(self) -> None:
        name = f'launchpad-grpc-{os.getpid()}-{self.port}-{secrets.token_hex(8)}'
        with open_files.starting_grpc():  # The relay's own descriptors come from it too.
            self._relay = relay.Relay(
                self._door, f'courier-{self._serving.label or "server"}-grpc', tcp.MAX_PENDING)
            self._server = self._new_server()
            self._bind(f'unix-abstract:{name}')
            self._server.start()
        self._relay.start('\0' + name)

    def _failed_behind_door(self, exc: BaseException) -> None:
        """gRPC could not start (out of descriptors, most likely): the connection waits in
        the door's queue, and the start is tried again a moment later."""
        _log.warning('courier server %s: cannot start gRPC for a connection yet: %s',
                     self._serving.label or 'server', exc)
        if self._server is not None:
            self._server.stop(None)
            self._server = None
        if self._relay is not None:
            self._relay.forget_door()
            self._relay = None
        self._started = False
        timer = threading.Timer(_RETRY_S, self._watch_again)
        timer.daemon = True
        timer.start()

    def _watch_again(self) -> None:
        with self._lock:
            if not self._started:  # Not stopped meanwhile (stop marks it started).
                first_connection.watch(self._waiting, self._start_serving)

    def stop(self, grace: float | None = None) -> None:
        if self._door is not None:
            with self._lock:
                self._started = True  # A connection arriving now starts nothing.
            # Forgotten after that, not before: a retry of a failed start (_watch_again)
            # could otherwise watch the door again just before it closes.
            first_connection.forget(self._waiting)
            if self._server is None:  # Never dialled: gRPC never started.
                self._door.close()
                return
            self._relay.shut_door()  # The port is free; calls in flight still answer.
            self._server.stop(grace).wait()
            self._relay.close()
            return
        if self._waiting is not None:
            first_connection.forget(self._waiting)
        # A gRPC server never started keeps its port bound after stop(): start it first.
        self._start_serving()
        self._server.stop(grace).wait()

    def _handle_call(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        # A writable copy, so arrays the method receives behave as on the local path.
        return self._reply(frames.from_bytes(bytearray(request)))

    def _reply(self, frame: frames.Frame) -> bytes:
        serving = self._serving
        try:
            reply = self._chunks.reply(serving.dispatch(frame))
        except (TypeError, MemoryError) as exc:
            reply = self._chunks.reply(serving.unsendable(frame, exc))
        serving.stats.sent(len(reply))  # Counted before it leaves, like the other paths.
        return reply

    def _handle_chunked_call(self, chunks, context: grpc.ServicerContext) -> bytes:
        return self._reply(frames.from_bytes(grpc_chunks.join(chunks)))

    def _handle_list_methods(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        return frames.to_bytes(self._serving.methods())

    def _handle_endpoints(self, requests, context: grpc.ServicerContext) -> bytes:
        """Who this server is and its raw-TCP port, MACed over the caller's nonce."""
        reply = grpc_tokens.hello_reply(self._serving.identity, context.invocation_metadata(),
                                        self._serving.tcp_port())
        if reply is None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f'Endpoints needs a {auth.NONCE_BYTES}-byte '
                          f'{grpc_tokens.HELLO_KEY} nonce (a client of an older launchpad_py?)')
        return reply


class _Guard(grpc.ServerInterceptor):
    """Refuses a gRPC call without a valid token before its request is read, let alone decoded.

    ``Endpoints`` needs no token: it reads no request and answers with a proof
    (see ``grpc_tokens.hello_reply``), which is how a client learns whom to make tokens for.
    """

    def __init__(self, identity: auth.Identity, label: str | None):
        self._checker = grpc_tokens.TokenChecker(identity)
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
    caller cannot carry another request (see grpc_tokens.grpc_token).
    """
    def wrap(behavior, streamed: bool):
        def run(request, context):
            if streamed:
                request = list(request)
            if grpc_tokens.digest(request if streamed else (request,)) != body_digest:
                refuse(context)
            context.send_initial_metadata(((grpc_tokens.PROOF_KEY, proof),))
            return behavior(iter(request) if streamed else request, context)
        return run

    kinds = {'unary_unary': False, 'unary_stream': False, 'stream_unary': True,
             'stream_stream': True}
    return handler._replace(**{k: wrap(getattr(handler, k), streamed)
                               for k, streamed in kinds.items() if getattr(handler, k) is not None})


def listen(serving: interface.Serving) -> GrpcListener:
    """The gRPC listener on the address's port; a CourierError when it cannot be bound."""
    return GrpcListener(serving)
