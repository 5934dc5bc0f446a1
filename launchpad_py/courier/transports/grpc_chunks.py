"""Payloads larger than one gRPC message, moved in chunks.

gRPC caps a message at 2 GiB, so a request frame larger than
``max_message_bytes`` goes as a client stream (``CallChunked``), and a reply
frame that large is kept by the server while the client pulls it in chunks
(``Fetch``) after a small ``CHUNKED`` answer that names it. A reply nobody
fetches is dropped after ``STASH_SECONDS``.
"""

from __future__ import annotations

import secrets
import threading
import time
from typing import Iterable, Iterator

from launchpad_py.courier import frames

MAX_MESSAGE_BYTES = 1 << 30
STASH_SECONDS = 600.0


def size(parts: list) -> int:
    return sum(memoryview(p).nbytes for p in parts)


def split(parts: list, limit: int) -> Iterator[bytes]:
    """The concatenation of ``parts`` as chunks of at most ``limit`` bytes."""
    pending: list[memoryview] = []
    filled = 0
    for part in parts:
        view = memoryview(part).cast('B')
        while view.nbytes:
            take = min(view.nbytes, limit - filled)
            pending.append(view[:take])
            filled += take
            view = view[take:]
            if filled == limit:
                yield b''.join(pending)
                pending, filled = [], 0
    if pending:
        yield b''.join(pending)


def join(chunks: Iterable[bytes]) -> bytearray:
    """Reassembles chunks into one writable buffer (arrays decoded from it are writable)."""
    whole = bytearray()
    for chunk in chunks:
        whole += chunk
    return whole


def check_limit(max_message_bytes: int) -> int:
    """``max_message_bytes`` when usable, else a ValueError naming it."""
    if max_message_bytes < 1024:
        raise ValueError(f'max_message_bytes must be at least 1024 (got {max_message_bytes})')
    return max_message_bytes


class ReplyStash:
    """Server side: answers in one message when it fits, else keeps it for ``Fetch``."""

    def __init__(self, max_message_bytes: int):
        self.limit = check_limit(max_message_bytes)
        self._stash: dict[bytes, tuple[float, list]] = {}
        self._lock = threading.Lock()

    def reply(self, result) -> bytes:
        parts, _ = frames.encode(0, frames.REPLY, result)
        total = size(parts)
        if total <= self.limit:
            return b''.join(parts)
        token = secrets.token_bytes(16)
        now = time.monotonic()
        with self._lock:
            for stale in [k for k, (t, _) in self._stash.items() if now - t > STASH_SECONDS]:
                del self._stash[stale]
            self._stash[token] = (now, parts)
        return frames.to_bytes((token, total), frames.CHUNKED)

    def fetch(self, token: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        with self._lock:
            entry = self._stash.pop(bytes(token), None)
        if entry is None:
            import grpc  # noqa: PLC0415 (a gRPC call is running: it is loaded)
            context.abort(grpc.StatusCode.NOT_FOUND,
                          f'no pending chunked reply (expired after {STASH_SECONDS:.0f} s?)')
        yield from split(entry[1], self.limit)
