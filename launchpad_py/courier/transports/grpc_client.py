"""The gRPC path of a ``Client``: the one that works across hosts.

With a secret, the caller first asks the server who it is (``Endpoints``:
its name, incarnation and raw-TCP port, MACed over a nonce of ours; see
``grpc_tokens.py``), refuses a server whose name is not the one it expects, and
only then sends calls. Each call carries a token made for that server and
that request body; each reply must carry the server's proof before it is
decoded. A server that restarted refuses tokens made for its earlier
incarnation: the caller asks again and sends the call once more (the
refused call was never read).

Requests larger than one message go as a chunk stream; a ``CHUNKED`` answer
means the reply is pulled in chunks (see ``grpc_chunks``). Channels are
shared per address within a process.
"""

from __future__ import annotations

import concurrent.futures
import hmac
import threading
import time
from typing import Any, Callable, Iterable, NamedTuple

import grpc

from launchpad_py.courier import auth, errors, fail_fast, frames, messages
from launchpad_py.courier.transports import grpc_chunks, grpc_tokens, interface, tls_probe
from launchpad_py.courier.transports.tls import GRPC_CHANNEL_OPTIONS, TlsCredentials

_channels: dict[tuple, grpc.Channel] = {}
_channels_lock = threading.Lock()

# Unlimited message sizes (chunking keeps each under gRPC's hard 2 GiB cap). A server
# that went away is tried again within a second (gRPC's default backoff reaches 120 s),
# so a call waiting for a restarted node goes through soon after it is back.
CHANNEL_OPTIONS = [
    ('grpc.max_send_message_length', -1),
    ('grpc.max_receive_message_length', -1),
    ('grpc.initial_reconnect_backoff_ms', 100),
    ('grpc.min_reconnect_backoff_ms', 100),
    ('grpc.max_reconnect_backoff_ms', 1000),
]
#: The failures of a first contact that another try may not meet (see ``_hello_error``).
_FIRST_CONTACT_LOST = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
#: How long a first contact waits for its channel to connect before it looks at why it
#: cannot (see ``GrpcCaller.hello``).
CONNECT_CHECK_S = 2.0


def channel(address: str, tls: TlsCredentials | None = None) -> grpc.Channel:
    key = (address, tls)
    with _channels_lock:
        found = _channels.get(key)
        if found is None:
            found = _channels[key] = (
                grpc.insecure_channel(address, options=CHANNEL_OPTIONS) if tls is None else
                grpc.secure_channel(address, tls.grpc_channel_credentials(),
                                    options=CHANNEL_OPTIONS + GRPC_CHANNEL_OPTIONS))
            fail_fast.track_grpc_channel(address, found, lambda: _forget(key, found))
        return found


def _forget(key: tuple, closed: grpc.Channel) -> None:
    with _channels_lock:
        if _channels.get(key) is closed:
            del _channels[key]


class _Stubs(NamedTuple):
    """One channel and its methods, replaced together when the channel is."""

    channel: grpc.Channel
    call: Any
    call_chunked: Any
    fetch: Any
    list: Any
    endpoints: Any

    @classmethod
    def of(cls, grpc_channel: grpc.Channel) -> '_Stubs':
        return cls(grpc_channel, grpc_channel.unary_unary(messages.CALL),
                   grpc_channel.stream_unary(messages.CALL_CHUNKED),
                   grpc_channel.unary_stream(messages.FETCH),
                   grpc_channel.unary_unary(messages.LIST_METHODS),
                   grpc_channel.unary_unary(messages.ENDPOINTS))


class GrpcCaller:
    """Sends requests to one address over gRPC and decodes the replies."""

    def __init__(self, address: str, timeout: float | None, wait_for_ready: bool,
                 max_message_bytes: int, secret: bytes | None = None,
                 tls: TlsCredentials | None = None, expected: str | None = None):
        self._address = address
        self._secret = secret
        self._expected = expected  # The server's name; None: whoever proves the secret.
        self._peer: auth.Identity | None = None  # Whom tokens are made for, once known.
        self._tls = tls
        self._timeout = timeout
        self._wait_for_ready = wait_for_ready
        self._limit = max_message_bytes
        self._stubs = _Stubs.of(channel(address, tls))

    def _stubs_now(self) -> tuple[_Stubs, dict]:
        """The stubs and options for the next call.

        A channel closed by ``fail_fast`` is replaced; calls under a fail-fast
        rule do not wait for their server.
        """
        stubs = self._stubs
        if fail_fast.closed_here(stubs.channel):
            stubs = self._stubs = _Stubs.of(channel(self._address, self._tls))
        wait = self._wait_for_ready and not fail_fast.applies(self._address)
        return stubs, {'timeout': self._timeout, 'wait_for_ready': wait}

    def _use(self, method: str, body: Iterable) -> tuple[_Stubs, dict, str | None]:
        """The stubs and options of a call of ``method`` sending ``body`` (its parts), and the
        proof the server must send back (None without a secret)."""
        stubs, options = self._stubs_now()
        if self._secret is None:
            return stubs, options, None
        peer = self._peer or self.hello()[0]
        options['metadata'], proof = grpc_tokens.grpc_token(peer, method, grpc_tokens.digest(body))
        return stubs, options, proof

    def hello(self) -> tuple[auth.Identity, int]:
        """Who the server is and its raw-TCP port (0: none), once it proved both.

        The first contact with a server. One that waits for its server asks in steps of
        ``CONNECT_CHECK_S`` while the channel cannot connect, and looks between them at
        why not (``_check_unreachable``): without a deadline it waited there for ever,
        silently, at a server that could never answer it.
        """
        nonce, metadata = grpc_tokens.hello_request()
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        while True:
            stubs, options = self._stubs_now()
            options['metadata'] = metadata
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            step = left
            if options['wait_for_ready'] and fail_fast.state(stubs.channel) != fail_fast.READY:
                step = CONNECT_CHECK_S if left is None else min(CONNECT_CHECK_S, left)
            try:
                reply = stubs.endpoints(b'', **{**options, 'timeout': step})
                break
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED or step == left:
                    raise self._hello_error(exc, stubs, options['wait_for_ready']) from None
            self._check_unreachable(stubs)
        self._peer, port = grpc_tokens.check_hello_reply(self._secret, nonce, reply, self._address,
                                                  self._expected)
        return self._peer, port

    def _hello_error(self, exc: grpc.RpcError, stubs: _Stubs, waits: bool) -> errors.CourierError:
        """The error of a first contact that failed. One that waits for its server and lost
        its connection or its call before the answer (UNAVAILABLE; CANCELLED, which this
        client never does to a first contact but ``fail_fast``) raises
        ``HandshakeTimeoutError``, which a call without a deadline dials again after
        (``client.py``): a server starved of CPU closes connections whose HTTP/2 settings it
        read too late ("Did not receive HTTP/2 settings before handshake timeout"), or
        cancels their calls (both seen in issue 25's fan-in at 1,000 over ssh). Not while a
        ``fail_fast`` rule covers the server (its program stops, or it left its group)."""
        if (waits and exc.code() in _FIRST_CONTACT_LOST
                and not fail_fast.applies(self._address)
                and not fail_fast.closed_here(stubs.channel)):
            return errors.HandshakeTimeoutError(
                f'no answer to the first contact (Endpoints) from {self._address}: '
                f'{exc.details()}')
        return self._error(exc, 'Endpoints', stubs)

    def _check_unreachable(self, stubs: _Stubs) -> None:
        """Raises when the channel cannot connect for a reason waiting will not cure: the
        listener there speaks TLS and this client not, or the other way round, or the two
        hold different TLS credentials."""
        if fail_fast.state(stubs.channel) != fail_fast.TRANSIENT_FAILURE:
            return  # Connecting, or connected meanwhile: the next step will tell.
        why = tls_probe.mismatch(self._address, self._tls)
        if why is not None:
            raise errors.TlsMismatchError(why)

    def _verify(self, call, proof: str | None, method: str) -> None:
        """Refuses a reply from a server that did not prove the secret, before decoding it."""
        if proof is None:
            return
        sent = next((v for k, v in call.initial_metadata() or () if k == grpc_tokens.PROOF_KEY), '')
        if not hmac.compare_digest(sent.encode(), proof.encode()):
            raise errors.AuthenticationError(
                f'the server at {self._address} did not prove it holds the program secret; '
                f'its reply to {method!r} was not decoded')

    def _error(self, error: Exception, method: str, stubs: _Stubs) -> errors.CourierError:
        if (isinstance(error, grpc.RpcError) and error.code() == grpc.StatusCode.UNAUTHENTICATED
                and grpc_tokens.STALE in (error.details() or '')):
            self._peer = None  # The server restarted: ask who it is now.
            return _Restarted(errors.translate_rpc_error(error, self._address, method).args[0])
        why = fail_fast.reason(self._address)
        if why is not None and (fail_fast.closed_here(stubs.channel) or (
                isinstance(error, grpc.RpcError) and error.code() == grpc.StatusCode.UNAVAILABLE)):
            return errors.CourierUnavailableError(
                f'server unavailable calling {method!r} on {self._address}: {why}')
        if fail_fast.closed_here(stubs.channel):
            return errors.CourierUnavailableError(
                f'server unavailable calling {method!r} on {self._address}: it is gone, and '
                'calls to it fail fast while its program stops')
        return errors.translate_rpc_error(error, self._address, method)

    def _start(self, request: tuple, future: bool):
        """(The reply and its call (sync) or the call's future, the proof it must carry, stubs)."""
        parts, _ = frames.encode(0, frames.REQUEST, request)
        size = grpc_chunks.size(parts)
        if size <= self._limit:
            try:
                payload = b''.join(parts)
            except MemoryError:
                raise MemoryError(f'cannot send {size} bytes to {request[0]!r} on '
                                  f'{self._address}: no memory for the gRPC message') from None
            stubs, options, proof = self._use(messages.CALL, (payload,))
            stub = stubs.call
        else:
            stubs, options, proof = self._use(messages.CALL_CHUNKED, parts)
            stub, payload = stubs.call_chunked, grpc_chunks.split(parts, self._limit)
        try:
            started = (stub.future if future else stub.with_call)(payload, **options)
        except grpc.RpcError as exc:
            raise self._error(exc, request[0], stubs) from None
        except ValueError as exc:  # The channel was closed by fail_fast since _use() chose it.
            if fail_fast.closed_here(stubs.channel):
                raise self._error(exc, request[0], stubs) from None
            raise
        return started, proof, stubs

    def _finish(self, reply: bytes, method: str, decode: Callable) -> Any:
        frame = frames.from_bytes(reply)
        if frame.kind == frames.CHUNKED:
            token, _ = frame.value()
            stubs, options, proof = self._use(messages.FETCH, (token,))
            try:
                chunks = stubs.fetch(token, **options)
                self._verify(chunks, proof, method)
                whole = grpc_chunks.join(chunks)
            except grpc.RpcError as exc:
                raise self._error(exc, method, stubs) from None
            frame = frames.from_bytes(whole)
            return decode(frame.pickled, frame.buffers)
        # A writable copy: arrays decoded from it behave as on every other path.
        frame = frames.from_bytes(bytearray(reply))
        return decode(frame.pickled, frame.buffers)

    def call(self, request: tuple, decode: Callable) -> Any:
        try:
            return self._call_once(request, decode)
        except _Restarted:  # Refused unread: sending it again cannot run it twice.
            return self._call_once(request, decode)

    def _call_once(self, request: tuple, decode: Callable) -> Any:
        (reply, call), proof, _ = self._start(request, future=False)
        self._verify(call, proof, request[0])
        return self._finish(reply, request[0], decode)

    def call_future(self, request: tuple, decode: Callable) -> concurrent.futures.Future:
        result: concurrent.futures.Future = concurrent.futures.Future()
        method = request[0]

        def finish(done) -> None:
            try:
                reply = done.result()
                self._verify(done, proof, method)
                if frames.from_bytes(reply).kind == frames.CHUNKED:
                    # Fetching blocks on gRPC, so never on gRPC's own callback thread.
                    threading.Thread(target=settle, args=(reply,), name='courier-fetch',
                                     daemon=True).start()
                    return
            except grpc.RpcError as exc:
                error = self._error(exc, method, stubs)
                if isinstance(error, _Restarted):  # Sent again, off gRPC's callback thread.
                    threading.Thread(target=again, name='courier-retry', daemon=True).start()
                    return
                result.set_exception(error)
                return
            except errors.AuthenticationError as exc:
                result.set_exception(exc)
                return
            settle(reply)

        def settle(reply: bytes) -> None:
            try:
                result.set_result(self._finish(reply, method, decode))
            except BaseException as exc:  # The remote exception, rebuilt.
                result.set_exception(exc)

        def again() -> None:
            try:
                result.set_result(self._call_once(request, decode))
            except BaseException as exc:
                result.set_exception(exc)

        call, proof, stubs = self._start(request, future=True)
        call.add_done_callback(finish)
        return result

    def list_methods(self) -> list[str]:
        stubs, options, proof = self._use(messages.LIST_METHODS, (b'',))
        try:
            reply, call = stubs.list.with_call(b'', **options)
        except grpc.RpcError as exc:
            raise self._error(exc, 'list_methods', stubs) from None
        self._verify(call, proof, 'list_methods')
        return frames.from_bytes(reply).value()

    def tcp_port(self) -> int:
        """The server's raw-TCP port (0: it has none), asked afresh (it changes on restart)."""
        return self.hello()[1]


def dial(dial: interface.Dial) -> GrpcCaller:
    """A client's gRPC caller (the channel under it is shared per address)."""
    return GrpcCaller(dial.address, dial.timeout, dial.wait_for_ready, dial.max_message_bytes,
                      dial.secret, dial.tls, dial.expected)


class _Restarted(errors.AuthenticationError):
    """The server refused a token made for its previous incarnation (it restarted)."""
