"""The gRPC path of a ``Client``: the one that works across hosts.

With a secret, every call carries a token (``auth.grpc_token``) and every
reply must carry the server's proof of the secret before it is decoded. The
``Endpoints`` reply is not checked: it is two plain bytes, and the raw-TCP
handshake proves the server anyway.

Requests larger than one message go as a chunk stream; a ``CHUNKED`` answer
means the reply is pulled in chunks (see ``grpc_chunks``). Channels are
shared per address within a process.
"""

from __future__ import annotations

import concurrent.futures
import hmac
import struct
import threading
from typing import Any, Callable

import grpc

from launchpad_py.courier import auth, errors, frames, grpc_chunks, wire
from launchpad_py.courier.tls import GRPC_CHANNEL_OPTIONS, TlsCredentials

_channels: dict[tuple, grpc.Channel] = {}
_channels_lock = threading.Lock()

# Unlimited message sizes (chunking keeps each under gRPC's hard 2 GiB cap).
CHANNEL_OPTIONS = [
    ('grpc.max_send_message_length', -1),
    ('grpc.max_receive_message_length', -1),
]


def channel(address: str, tls: TlsCredentials | None = None) -> grpc.Channel:
    with _channels_lock:
        found = _channels.get((address, tls))
        if found is None:
            found = _channels[(address, tls)] = (
                grpc.insecure_channel(address, options=CHANNEL_OPTIONS) if tls is None else
                grpc.secure_channel(address, tls.grpc_channel_credentials(),
                                    options=CHANNEL_OPTIONS + GRPC_CHANNEL_OPTIONS))
        return found


class GrpcCaller:
    """Sends requests to one address over gRPC and decodes the replies."""

    def __init__(self, address: str, timeout: float | None, wait_for_ready: bool,
                 max_message_bytes: int, secret: bytes | None = None,
                 tls: TlsCredentials | None = None):
        self._address = address
        self._secret = secret
        self._timeout = timeout
        self._wait_for_ready = wait_for_ready
        self._limit = max_message_bytes
        grpc_channel = channel(address, tls)
        self._call = grpc_channel.unary_unary(wire.CALL)
        self._call_chunked = grpc_channel.stream_unary(wire.CALL_CHUNKED)
        self._fetch = grpc_channel.unary_stream(wire.FETCH)
        self._list = grpc_channel.unary_unary(wire.LIST_METHODS)
        self._endpoints = grpc_channel.unary_unary(wire.ENDPOINTS)

    def _options(self, method: str) -> tuple[dict, str | None]:
        """The call's options, and the proof the server must send back (None: no secret)."""
        options = {'timeout': self._timeout, 'wait_for_ready': self._wait_for_ready}
        if self._secret is None:
            return options, None
        options['metadata'], proof = auth.grpc_token(self._secret, method)  # See auth.py.
        return options, proof

    def _verify(self, call, proof: str | None, method: str) -> None:
        """Refuses a reply from a server that did not prove the secret, before decoding it."""
        if proof is None:
            return
        sent = next((v for k, v in call.initial_metadata() or () if k == auth.PROOF_KEY), '')
        if not hmac.compare_digest(sent.encode(), proof.encode()):
            raise errors.AuthenticationError(
                f'the server at {self._address} did not prove it holds the program secret; '
                f'its reply to {method!r} was not decoded')

    def _start(self, request: tuple, future: bool):
        """The reply and its call (sync), or the call's future; and the proof it must carry."""
        parts, _ = frames.encode(0, frames.REQUEST, request)
        size = grpc_chunks.size(parts)
        if size <= self._limit:
            stub = self._call
            try:
                message = b''.join(parts)
            except MemoryError:
                raise MemoryError(f'cannot send {size} bytes to {request[0]!r} on '
                                  f'{self._address}: no memory for the gRPC message') from None
            options, proof = self._options(wire.CALL)
        else:
            stub, message = self._call_chunked, grpc_chunks.split(parts, self._limit)
            options, proof = self._options(wire.CALL_CHUNKED)
        return (stub.future if future else stub.with_call)(message, **options), proof

    def _finish(self, reply: bytes, method: str, decode: Callable) -> Any:
        frame = frames.from_bytes(reply)
        if frame.kind == frames.CHUNKED:
            token, _ = frame.value()
            options, proof = self._options(wire.FETCH)
            try:
                chunks = self._fetch(token, **options)
                self._verify(chunks, proof, method)
                whole = grpc_chunks.join(chunks)
            except grpc.RpcError as exc:
                raise errors.translate_rpc_error(exc, self._address, method) from None
            return decode(frames.from_bytes(whole))
        # A writable copy: arrays decoded from it behave as on every other path.
        return decode(frames.from_bytes(bytearray(reply)))

    def call(self, request: tuple, decode: Callable) -> Any:
        try:
            (reply, call), proof = self._start(request, future=False)
        except grpc.RpcError as exc:
            raise errors.translate_rpc_error(exc, self._address, request[0]) from None
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
                result.set_exception(errors.translate_rpc_error(exc, self._address, method))
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

        call, proof = self._start(request, future=True)
        call.add_done_callback(finish)
        return result

    def list_methods(self) -> list[str]:
        try:
            options, proof = self._options(wire.LIST_METHODS)
            reply, call = self._list.with_call(b'', **options)
        except grpc.RpcError as exc:
            raise errors.translate_rpc_error(exc, self._address, 'list_methods') from None
        self._verify(call, proof, 'list_methods')
        return frames.from_bytes(reply).value()

    def tcp_port(self) -> int:
        """The server's raw-TCP port (0: it has none). Plain bytes: nothing to unpickle."""
        try:
            reply = self._endpoints(b'', **self._options(wire.ENDPOINTS)[0])
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                return 0
            raise errors.translate_rpc_error(exc, self._address, 'Endpoints') from None
        return struct.unpack('<H', reply)[0] if len(reply) == 2 else 0
