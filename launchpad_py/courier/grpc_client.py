"""The gRPC path of a ``Client``: the one that works across hosts.

Requests larger than one message go as a chunk stream; a ``CHUNKED`` answer
means the reply is pulled in chunks (see ``grpc_chunks``). Channels are
shared per address within a process.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any, Callable, NamedTuple

import grpc

from launchpad_py.courier import errors, fail_fast, frames, grpc_chunks, wire

_channels: dict[str, grpc.Channel] = {}
_channels_lock = threading.Lock()

# Unlimited message sizes (chunking keeps each under gRPC's hard 2 GiB cap).
CHANNEL_OPTIONS = [
    ('grpc.max_send_message_length', -1),
    ('grpc.max_receive_message_length', -1),
]


def channel(address: str) -> grpc.Channel:
    with _channels_lock:
        found = _channels.get(address)
        if found is None:
            found = _channels[address] = grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
            fail_fast.track_grpc_channel(address, found, lambda: _forget(address, found))
        return found


def _forget(address: str, closed: grpc.Channel) -> None:
    with _channels_lock:
        if _channels.get(address) is closed:
            del _channels[address]


class _Stubs(NamedTuple):
    """One channel and its methods, replaced together when the channel is."""

    channel: grpc.Channel
    call: Any
    call_chunked: Any
    fetch: Any
    list: Any

    @classmethod
    def of(cls, grpc_channel: grpc.Channel) -> '_Stubs':
        return cls(grpc_channel, grpc_channel.unary_unary(wire.CALL),
                   grpc_channel.stream_unary(wire.CALL_CHUNKED),
                   grpc_channel.unary_stream(wire.FETCH),
                   grpc_channel.unary_unary(wire.LIST_METHODS))


class GrpcCaller:
    """Sends requests to one address over gRPC and decodes the replies."""

    def __init__(self, address: str, timeout: float | None, wait_for_ready: bool,
                 max_message_bytes: int):
        self._address = address
        self._timeout = timeout
        self._wait_for_ready = wait_for_ready
        self._limit = max_message_bytes
        self._stubs = _Stubs.of(channel(address))

    def _use(self) -> tuple[_Stubs, dict]:
        """The stubs and call options for the next call (see ``fail_fast``)."""
        stubs = self._stubs
        if fail_fast.closed_here(stubs.channel):
            stubs = self._stubs = _Stubs.of(channel(self._address))
        wait = self._wait_for_ready and not fail_fast.applies(self._address)
        return stubs, {'timeout': self._timeout, 'wait_for_ready': wait}

    def _error(self, error: Exception, method: str, stubs: _Stubs) -> errors.CourierError:
        if fail_fast.closed_here(stubs.channel):
            return errors.CourierUnavailableError(
                f'server unavailable calling {method!r} on {self._address}: it is gone, and '
                'calls to it fail fast while its program stops')
        return errors.translate_rpc_error(error, self._address, method)

    def _start(self, request: tuple, future: bool, stubs: _Stubs, options: dict):
        parts, _ = frames.encode(0, frames.REQUEST, request)
        size = grpc_chunks.size(parts)
        if size <= self._limit:
            stub = stubs.call.future if future else stubs.call
            try:
                payload = b''.join(parts)
            except MemoryError:
                raise MemoryError(f'cannot send {size} bytes to {request[0]!r} on '
                                  f'{self._address}: no memory for the gRPC message') from None
        else:
            stub = stubs.call_chunked.future if future else stubs.call_chunked
            payload = grpc_chunks.split(parts, self._limit)
        try:
            return stub(payload, **options)
        except ValueError as exc:  # The channel was closed by fail_fast since _use() chose it.
            if fail_fast.closed_here(stubs.channel):
                raise self._error(exc, request[0], stubs) from None
            raise

    def _finish(self, reply: bytes, method: str, decode: Callable) -> Any:
        frame = frames.from_bytes(reply)
        if frame.kind == frames.CHUNKED:
            token, _ = frame.value()
            stubs, options = self._use()
            try:
                whole = grpc_chunks.join(stubs.fetch(token, **options))
            except grpc.RpcError as exc:
                raise self._error(exc, method, stubs) from None
            return decode(frames.from_bytes(whole))
        # A writable copy: arrays decoded from it behave as on every other path.
        return decode(frames.from_bytes(bytearray(reply)))

    def call(self, request: tuple, decode: Callable) -> Any:
        stubs, options = self._use()
        try:
            reply = self._start(request, False, stubs, options)
        except grpc.RpcError as exc:
            raise self._error(exc, request[0], stubs) from None
        return self._finish(reply, request[0], decode)

    def call_future(self, request: tuple, decode: Callable) -> concurrent.futures.Future:
        result: concurrent.futures.Future = concurrent.futures.Future()
        method = request[0]
        stubs, options = self._use()

        def finish(done) -> None:
            try:
                reply = done.result()
                if frames.from_bytes(reply).kind == frames.CHUNKED:
                    # Fetching blocks on gRPC, so never on gRPC's own callback thread.
                    threading.Thread(target=settle, args=(reply,), name='courier-fetch',
                                     daemon=True).start()
                    return
            except grpc.RpcError as exc:
                result.set_exception(self._error(exc, method, stubs))
                return
            settle(reply)

        def settle(reply: bytes) -> None:
            try:
                result.set_result(self._finish(reply, method, decode))
            except BaseException as exc:  # The remote exception, rebuilt.
                result.set_exception(exc)

        self._start(request, True, stubs, options).add_done_callback(finish)
        return result

    def list_methods(self) -> list[str]:
        stubs, options = self._use()
        try:
            reply = stubs.list(b'', **options)
        except grpc.RpcError as exc:
            raise self._error(exc, 'list_methods', stubs) from None
        return frames.from_bytes(reply).value()
