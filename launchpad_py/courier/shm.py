"""Shared-memory segments for large buffers between processes of one host.

A sender copies a message's large buffers once into a segment (an anonymous
``memfd``) and passes its file descriptor over the Unix socket; the receiver
maps it and builds its arrays directly on the mapping. Nothing has a name in
the file system, so nothing can leak: the kernel frees a segment when the
last descriptor and mapping of it are gone, also after a crash.

Segments are reused: the receiver tells the sender (``released`` ids carried
on its next message) once every array built on a segment is garbage, and
the sender then writes the next message into the same, already faulted-in,
pages. Faulting in fresh pages costs more than the copy itself (measured:
64 MiB into a fresh memfd ≈28 ms, into a reused one ≈6 ms).
"""

from __future__ import annotations

import collections
import itertools
import mmap
import os
import threading
import weakref

ALIGN = 64
# Free segments kept for reuse per size class and connection (a round trip in
# flight needs two or three), and the most free bytes kept in all: beyond that,
# segments of other sizes are unmapped first.
MAX_FREE_PER_SIZE = 2
MAX_FREE_BYTES = 4 << 30


def aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _size_class(n: int) -> int:
    """Rounds up to a power of two (at least one page) so segments are reusable."""
    return max(mmap.PAGESIZE, 1 << (n - 1).bit_length())


class _Segment:
    __slots__ = ('id', 'fd', 'size', 'mapping')

    def __init__(self, segment_id: int, size: int):
        self.id = segment_id
        self.size = size
        self.fd = os.memfd_create(f'courier-{segment_id}', os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, size)
            self.mapping = mmap.mmap(self.fd, size)
        except BaseException:
            os.close(self.fd)
            raise

    def close(self) -> None:
        self.mapping.close()
        os.close(self.fd)


class SegmentPool:
    """The segments one side of a connection writes into."""

    _ids = itertools.count(1)

    def __init__(self):
        self._lock = threading.Lock()
        self._free: dict[int, collections.deque[_Segment]] = {}
        self._in_use: dict[int, _Segment] = {}
        self._closed = False

    def write(self, buffers: list[memoryview]) -> tuple[int, int, int, list[int]]:
        """Copies ``buffers`` into one segment: (id, fd, size, offsets)."""
        offsets, total = [], 0
        for buffer in buffers:
            offsets.append(total)
            total = aligned(total + buffer.nbytes)
        segment = self._take(_size_class(total))
        target = segment.mapping
        for offset, buffer in zip(offsets, buffers):
            target[offset:offset + buffer.nbytes] = buffer
        return segment.id, segment.fd, segment.size, offsets

    def _take(self, size: int) -> _Segment:
        with self._lock:
            free = self._free.get(size)
            segment = free.popleft() if free else None
        if segment is None:
            segment = _Segment(next(self._ids), size)
        with self._lock:
            self._in_use[segment.id] = segment
        return segment

    def release(self, segment_ids) -> None:
        """The receiver no longer uses these segments: keep a few for reuse."""
        drop = []
        with self._lock:
            for segment_id in segment_ids:
                segment = self._in_use.pop(segment_id, None)
                if segment is None:
                    continue
                free = self._free.setdefault(segment.size, collections.deque())
                if self._closed or len(free) >= MAX_FREE_PER_SIZE:
                    drop.append(segment)
                    continue
                free.append(segment)
                drop += self._trim(keep=segment.size)
        for segment in drop:
            segment.close()

    def _trim(self, keep: int) -> list[_Segment]:
        """Free segments to unmap so at most MAX_FREE_BYTES stay, other sizes first."""
        total = sum(size * len(free) for size, free in self._free.items())
        out = []
        for size in sorted(self._free, key=lambda s: (s == keep, s)):
            free = self._free[size]
            while free and total > MAX_FREE_BYTES:
                out.append(free.popleft())
                total -= size
        return out

    def close(self) -> None:
        """Unmaps everything this side holds (receivers keep their own mappings)."""
        with self._lock:
            self._closed = True
            segments = [s for free in self._free.values() for s in free]
            segments += self._in_use.values()
            self._free.clear()
            self._in_use.clear()
        for segment in segments:
            segment.close()


class _Mapping(mmap.mmap):
    """An ``mmap`` that can carry a finalizer (plain ``mmap`` has no weakref slot)."""


def map_segment(fd: int, size: int, segment_id: int, released: 'ReleaseQueue') -> memoryview:
    """Maps a received segment; ``released`` learns its id once nothing uses it."""
    try:
        mapping = _Mapping(fd, size)
    finally:
        os.close(fd)
    weakref.finalize(mapping, released.append, segment_id)
    return memoryview(mapping)


class ReleaseQueue:
    """Ids of received segments that became garbage, to send back to their owner.

    Appended to from finalizers (any thread, possibly inside a send), so this
    never takes a lock that sending holds.
    """

    def __init__(self):
        #: The ids waiting; empty is the usual case, tested without a call (``if queue.ids``).
        self.ids: collections.deque[int] = collections.deque()

    def append(self, segment_id: int) -> None:
        self.ids.append(segment_id)

    def drain(self, limit: int = 1024) -> list[int] | tuple:
        if not self.ids:
            return ()
        out = []
        while self.ids and len(out) < limit:
            out.append(self.ids.popleft())
        return out
