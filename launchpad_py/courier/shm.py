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
64 MiB into a fresh memfd ≈28 ms, into a reused one ≈6 ms). A large buffer is
copied in parts on two to four threads (``parallel_copy``): 64 MiB in ≈4.5 ms.

The receiver keeps its mapping of each segment too (``SegmentMappings``), so a
reused segment is not mapped and faulted in again on its side either (64 MiB
read through a fresh mapping ≈21 ms, through a kept one ≈9 ms). A sender that
closes a segment says so on its next frame (a released id with ``DROPPED``
set) and the receiver forgets its mapping; at most ``MAX_MAPPINGS`` are kept
per connection, so a peer that never sends again cannot make it hold more.
"""

from __future__ import annotations

import collections
import ctypes
import itertools
import mmap
import os
import threading
import weakref

from launchpad_py.courier import parallel_copy

ALIGN = 64
# Free segments kept for reuse per size class and connection (a round trip in
# flight needs two or three), and the most free bytes kept in all: beyond that,
# segments of other sizes are unmapped first.
MAX_FREE_PER_SIZE = 2
MAX_FREE_BYTES = 4 << 30
# A released id with this bit set is a notice, not a release: its sender closed that segment
# of its own (segment ids count from 1 and never reach it).
DROPPED = 1 << 63
# Mappings of the peer's segments a receiver keeps per connection, the oldest used out
# first: a round trip in flight uses two or three of one size.
MAX_MAPPINGS = 8


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
    """The segments one side of a connection writes into.

    ``dropped`` (the connection's ``ReleaseQueue``) learns the id of each segment closed
    while the connection lives, with ``DROPPED`` set, for the next frame to tell the peer.
    """

    _ids = itertools.count(1)

    def __init__(self, dropped: 'ReleaseQueue | None' = None):
        self._dropped = dropped
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
        for offset, buffer in zip(offsets, buffers):
            parallel_copy.copy_into(segment.mapping, offset, buffer)
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
            if self._dropped is not None:  # The peer's mapping would keep its memory alive.
                self._dropped.append(segment.id | DROPPED)

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


class SegmentMappings:
    """A connection's mappings of the segments its peer sends, kept across frames.

    The descriptor still comes with every frame: a kept mapping serves only a segment of
    the same file (device and inode) and size, so correctness never rests on this cache::

        data = mappings.view(fd, size, segment_id)  # fd is closed; views of data are the frame's
        mappings.forget(segment_id)  # its sender closed it (a DROPPED notice)

    Each frame gets its own exporter over the mapping, so ``released`` learns the id once
    every view of *that frame* is garbage (the sender may then write the segment again). A
    mapping is never closed here (views may live): dropped, it goes with its last view.
    """

    def __init__(self, released: 'ReleaseQueue', limit: int = MAX_MAPPINGS):
        self._released, self._limit = released, limit
        # segment id -> (mapping, size, (st_dev, st_ino)); the most recently used last.
        self._kept: collections.OrderedDict[int, tuple] = collections.OrderedDict()
        self._mapped = self._reused = 0

    def view(self, fd: int, size: int, segment_id: int) -> memoryview:
        """The segment of ``fd`` as bytes (``fd`` is closed either way)."""
        try:
            info = os.fstat(fd)
            file = (info.st_dev, info.st_ino)
            kept = self._kept.get(segment_id)
            if kept is not None and kept[1] == size and kept[2] == file:
                mapping = kept[0]
                self._reused += 1
            else:
                mapping = mmap.mmap(fd, size)
                self._mapped += 1
                self._kept[segment_id] = (mapping, size, file)
            self._kept.move_to_end(segment_id)
            while len(self._kept) > self._limit:
                self._kept.popitem(last=False)
        finally:
            os.close(fd)
        # A ctypes array exports the mapping's memory as itself, so every view keeps it (and
        # the mapping) alive and its finalizer runs after the frame's last view. (A
        # ``pickle.PickleBuffer`` would not: its views hold the mapping, not it.)
        export = (ctypes.c_ubyte * size).from_buffer(mapping)
        weakref.finalize(export, self._released.append, segment_id)
        return memoryview(export).cast('B')

    def forget(self, segment_id: int) -> None:
        """Drops the mapping of a segment its sender closed (views of it keep it until they go)."""
        self._kept.pop(segment_id, None)

    def close(self) -> None:
        self._kept.clear()

    def statistics(self) -> dict:
        """``mapped``: segments mapped afresh; ``reused``: frames served by a kept mapping;
        ``kept``: mappings kept now."""
        return {'mapped': self._mapped, 'reused': self._reused, 'kept': len(self._kept)}


class ReleaseQueue:
    """Ids of received segments that became garbage, to send back to their owner, and
    notices (``DROPPED`` set) of our own segments we closed, for the peer to unmap.

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
