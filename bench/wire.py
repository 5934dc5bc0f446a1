"""Pickle-5 framing shared by the benchmark peers.

A frame is::

    u32 nbufs | u64 pickle_len | nbufs x u64 buffer_len | pickle bytes | buffers

The pickle is made with protocol 5 and a ``buffer_callback``, so large
contiguous arrays (numpy) travel as out-of-band buffers and are never copied
into the pickle stream.  On a socket the parts go out with one
``socket.sendmsg`` (scatter/gather) and each buffer is read with
``recv_into`` straight into a freshly allocated buffer (``bytearray``, or a
huge-page anonymous mapping for large ones, see :func:`alloc_buffer`) that
then backs the unpickled array (no further copy).

The same frame, joined into one ``bytes``, is the gRPC peer's payload.
"""

from __future__ import annotations

import mmap
import os
import pickle
import socket
import struct

_PREFIX = struct.Struct("<IQ")
_IOV_MAX = min(os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024, 1024)
# Reads smaller than this go through the reader's scratch buffer, so a tiny
# frame costs one recv syscall; larger buffers are received in place.
_SMALL_READ = 64 * 1024
# Buffers at least this large are anonymous private mappings with transparent
# huge pages requested, instead of ``bytearray``: ``bytearray(n)`` zero-fills
# with 4 KiB page faults, which measured here as ~100 ms per 64 MiB round trip
# against ~25 ms with huge-page mappings (numpy's own allocator does the same
# madvise for large arrays).
_MMAP_MIN = 4 * 1024 * 1024


def alloc_buffer(n: int):
    """A writable buffer of ``n`` bytes for ``recv_into`` (contents undefined)."""
    if n < _MMAP_MIN:
        return bytearray(n)
    m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is not None:
        try:
            m.madvise(advice)
        except OSError:
            pass
    return m


def encode(obj) -> list:
    """Returns the frame for ``obj`` as a list of bytes-like parts."""
    buffers: list = []
    data = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    views = [b.raw() for b in buffers]
    head = _PREFIX.pack(len(views), len(data))
    if views:
        head += struct.pack(f"<{len(views)}Q", *(v.nbytes for v in views))
    return [head, data, *views]


def encode_bytes(obj) -> bytes:
    """The frame as one ``bytes`` (copies the buffers once; used for gRPC)."""
    return b"".join(encode(obj))


def decode_bytes(payload) -> object:
    """Inverse of :func:`encode_bytes`; buffers are zero-copy views of payload."""
    mv = memoryview(payload)
    nbufs, plen = _PREFIX.unpack_from(mv, 0)
    pos = _PREFIX.size
    lens = struct.unpack_from(f"<{nbufs}Q", mv, pos) if nbufs else ()
    pos += 8 * nbufs
    data = mv[pos:pos + plen]
    pos += plen
    buffers = []
    for n in lens:
        buffers.append(mv[pos:pos + n])
        pos += n
    return pickle.loads(data, buffers=buffers)


def send_parts(sock: socket.socket, parts) -> None:
    """Sends all parts with scatter/gather ``sendmsg``, handling short writes."""
    views = [memoryview(p) for p in parts if len(p)]
    views = [v if v.format == "B" and v.ndim == 1 else v.cast("B") for v in views]
    while views:
        sent = sock.sendmsg(views[:_IOV_MAX])
        while sent:
            v = views[0]
            if sent >= v.nbytes:
                sent -= v.nbytes
                views.pop(0)
            else:
                views[0] = v[sent:]
                sent = 0


def send_obj(sock: socket.socket, obj) -> None:
    send_parts(sock, encode(obj))


class FrameReader:
    """Reads frames from a stream socket.

    Small reads are served from a scratch buffer (one ``recv_into`` may bring
    in several pipelined frames); out-of-band buffers larger than
    ``_SMALL_READ`` are received directly into their own ``bytearray``.
    """

    def __init__(self, sock: socket.socket, scratch_size: int = 256 * 1024):
        self._sock = sock
        self._buf = bytearray(scratch_size)
        self._mv = memoryview(self._buf)
        self._start = 0
        self._end = 0

    def _fill(self, n: int) -> None:
        """Ensures at least ``n`` unread bytes are in the scratch buffer."""
        if self._end - self._start >= n:
            return
        if self._start + n > len(self._buf):
            rem = self._end - self._start
            if n > len(self._buf):
                new = bytearray(max(n, 2 * len(self._buf)))
                new[:rem] = self._mv[self._start:self._end]
                self._buf = new
                self._mv = memoryview(new)
            else:
                self._mv[:rem] = self._mv[self._start:self._end]
            self._start, self._end = 0, rem
        recv_into = self._sock.recv_into
        while self._end - self._start < n:
            k = recv_into(self._mv[self._end:])
            if not k:
                raise EOFError("peer closed the connection")
            self._end += k

    def _read_into(self, dst: memoryview) -> None:
        n = dst.nbytes
        avail = self._end - self._start
        take = min(n, avail)
        if take:
            dst[:take] = self._mv[self._start:self._start + take]
            self._start += take
        if take == n:
            return
        rest = n - take
        if rest <= _SMALL_READ:
            self._fill(rest)
            dst[take:] = self._mv[self._start:self._start + rest]
            self._start += rest
            return
        pos = take
        recv_into = self._sock.recv_into
        while pos < n:
            k = recv_into(dst[pos:])
            if not k:
                raise EOFError("peer closed the connection")
            pos += k

    def read(self):
        """Reads one frame and returns the unpickled object."""
        self._fill(_PREFIX.size)
        nbufs, plen = _PREFIX.unpack_from(self._buf, self._start)
        self._start += _PREFIX.size
        if nbufs:
            self._fill(8 * nbufs)
            lens = struct.unpack_from(f"<{nbufs}Q", self._buf, self._start)
            self._start += 8 * nbufs
        else:
            lens = ()
        if plen <= len(self._buf):
            self._fill(plen)
            # Copied out: later buffer reads may reuse the scratch region.
            data = bytes(self._mv[self._start:self._start + plen])
            self._start += plen
        else:
            data = alloc_buffer(plen)
            self._read_into(memoryview(data))
        buffers = []
        for n in lens:
            b = alloc_buffer(n)
            self._read_into(memoryview(b))
            buffers.append(b)
        return pickle.loads(data, buffers=buffers)
