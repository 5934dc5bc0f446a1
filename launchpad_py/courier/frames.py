"""The one courier message format, on a Unix socket, raw TCP, or inside gRPC messages.

A frame is a fixed header, the ids of segments its sender released, a table
of out-of-band buffers, the pickle stream, then the buffers kept in band::

    header | released ids (u64 each) | buffer table (i64 offset, u64 length) |
    pickle | in-band buffers

A buffer whose offset is ``-1`` follows the pickle in the frame; any other
offset points into the frame's shared-memory segment, whose descriptor rides
on the frame's first bytes (``SCM_RIGHTS``). Over TCP and gRPC every buffer is
in band.

A released id is one of the receiver's segments its sender no longer uses (the
receiver may write it again), or, with its top bit set (``shm.DROPPED``), a
notice that the sender closed a segment of its own: the receiver then forgets
its mapping of that segment (``shm.SegmentMappings``).
"""

from __future__ import annotations

import array
import collections
import mmap
import socket
import ssl
import struct
import sys
import threading
from typing import Any, Protocol

from launchpad_py.courier import frame_loop, serialization, shm

# A reply too large for one gRPC message says so with a CHUNKED frame (see grpc_chunks).
REQUEST, REPLY, CHUNKED = 1, 2, 4
# call_id, kind, released count, buffer count, pickle length, segment id, segment size
HEADER = struct.Struct('<QBxHIQQQ')
_HEADER_SIZE = HEADER.size
_unpack_header = HEADER.unpack_from
_pack_header = HEADER.pack
_ENTRY = struct.Struct('<qQ')
_BUFFER_ALIGN = 16
_PADDING = bytes(_BUFFER_ALIGN)
_IOV_MAX = 512
# Below this, reading goes through the reader's scratch buffer (one syscall for
# a small frame); above it, a buffer is received straight into its own memory.
_SMALL_READ = 64 * 1024
# Received in-band buffers this large get their own anonymous mapping: zeroing
# a ``bytearray`` page by page costs more than the transfer (numpy does the same).
_MMAP_MIN = 4 * 1024 * 1024
_TAKEN, _STREAM_ENDED = 0, 2  # Statuses of ``_cframes.take_replies``.


class Connection(Protocol):
    """A socket that carries frames, whichever path: ``uds.Connection`` (Unix socket, with
    shared memory) or ``tcp.Connection`` (raw TCP, every buffer in band). Clients
    (``socket_channel``, ``futures_connection``) and listeners (``uds_server``) use only this."""

    sock: socket.socket
    reader: 'Reader'
    outbox: 'Outbox'

    def send(self, call_id: int, kind: int, obj: Any, counts=None, hold: bool = False) -> None:
        """Sends a frame; ``hold``: a small one may wait for the next send or ``flush``."""

    def flush(self) -> None:
        """Sends the frames ``send(hold=True)`` kept back."""

    def read(self) -> 'Frame': ...

    #: Whether a send to a peer that closed may succeed (TCP), so ``peer_gone`` is worth asking.
    may_go_unseen: bool

    def peer_gone(self) -> bool: ...

    def close(self) -> None: ...


class Frame:
    """A decoded frame, before its payload is unpickled."""

    __slots__ = ('call_id', 'kind', 'pickled', 'buffers', 'released', 'method')

    def __init__(self, call_id, kind, pickled, buffers, released):
        self.call_id, self.kind, self.pickled = call_id, kind, pickled
        self.buffers, self.released = buffers, released
        self.method = '?'  # Set by the server once the request is decoded.

    def value(self, device_arrays: bool = False) -> Any:
        return serialization.decode(self.pickled, self.buffers, device_arrays=device_arrays)


def encode(call_id: int, kind: int, obj: Any, pool: shm.SegmentPool | None = None,
           released: list[int] | tuple = (),
           shm_min_bytes: int | None = None) -> tuple[list, int | None]:
    """The frame's parts (for ``sendmsg``) and the segment descriptor to pass, if any."""
    pickled, buffers = serialization.encode(obj)
    return encode_parts(call_id, kind, pickled, buffers, pool, released, shm_min_bytes)


def encode_parts(call_id: int, kind: int, pickled: bytes, buffers: list,
                 pool: shm.SegmentPool | None = None, released: list[int] | tuple = (),
                 shm_min_bytes: int | None = None) -> tuple[list, int | None]:
    """``encode`` of a payload already serialized (``serialization.encode``)."""
    if not buffers and not released:  # The common small call: one part, one syscall.
        return [HEADER.pack(call_id, kind, 0, 0, len(pickled), 0, 0) + pickled], None
    shared = [] if pool is None or shm_min_bytes is None else [
        b for b in buffers if b.nbytes >= shm_min_bytes]
    segment_id = segment_size = 0
    fd = None
    offsets: dict[int, int] = {}
    if shared and sum(b.nbytes for b in shared) >= shm_min_bytes:
        try:
            segment_id, fd, segment_size, places = pool.write(shared)
        except OSError:  # No shared memory to be had (limits, no memfd): the socket carries it.
            shared = []
        else:
            offsets = {id(b): place for b, place in zip(shared, places)}
    table = b''.join(_ENTRY.pack(offsets.get(id(b), -1), b.nbytes) for b in buffers)
    head = HEADER.pack(call_id, kind, len(released), len(buffers), len(pickled),
                       segment_id, segment_size)
    ids = struct.pack(f'<{len(released)}Q', *released) if released else b''
    parts = [head + ids + table, pickled]
    position = len(parts[0]) + len(pickled)
    for buffer in buffers:
        if id(buffer) not in offsets:
            if position % _BUFFER_ALIGN:
                parts.append(_PADDING[:_padding(position)])
                position += _padding(position)
            parts.append(buffer)
            position += buffer.nbytes
    return parts, fd


def encoded_size(parts: list) -> int:
    """Payload bytes of an encoded frame, buffers in shared memory included."""
    if len(parts) == 1:
        return len(parts[0])
    head = parts[0]
    _, _, n_released, n_buffers, pickle_len, _, _ = HEADER.unpack_from(head, 0)
    table = HEADER.size + 8 * n_released
    buffers = sum(_ENTRY.unpack_from(head, table + i * _ENTRY.size)[1] for i in range(n_buffers))
    return len(head) + pickle_len + buffers


def _padding(position: int) -> int:
    """Bytes that put an in-band buffer on an aligned offset (numpy wants aligned data)."""
    return -position % _BUFFER_ALIGN


def to_bytes(obj: Any, kind: int = REPLY) -> bytes:
    """A whole frame as one ``bytes`` (the gRPC message body)."""
    parts, _ = encode(0, kind, obj)
    return b''.join(parts)


def from_bytes(data: bytes | bytearray | memoryview) -> Frame:
    """Parses a frame held in memory; buffers are views of ``data``.

    Arrays decoded from a ``bytes`` frame are read-only; pass a ``bytearray``
    for writable ones.
    """
    view = memoryview(data)
    call_id, kind, n_released, n_buffers, pickle_len, _, _ = HEADER.unpack_from(view, 0)
    pos = HEADER.size + 8 * n_released
    entries = [_ENTRY.unpack_from(view, pos + i * _ENTRY.size) for i in range(n_buffers)]
    pos += _ENTRY.size * n_buffers
    pickled = view[pos:pos + pickle_len]
    pos += pickle_len
    buffers = []
    for _, length in entries:
        pos += _padding(pos)
        buffers.append(view[pos:pos + length])
        pos += length
    return Frame(call_id, kind, pickled, buffers, [])


def send(sock: socket.socket, parts: list, fd: int | None) -> None:
    """Writes all parts with scatter/gather ``sendmsg``; the descriptor goes first."""
    if fd is None and len(parts) == 1:
        sock.sendall(parts[0])
        return
    views = [p if isinstance(p, memoryview) else memoryview(p) for p in parts if len(p)]
    views = [v if v.format == 'B' and v.ndim == 1 and v.contiguous else v.cast('B')
             for v in views]
    if isinstance(sock, ssl.SSLSocket):  # TLS has no sendmsg: the parts one after another.
        for view in views:
            sock.sendall(view)
        return
    if fd is not None:
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', [fd]))]
        sent = sock.sendmsg(views[:1], rights)
        views = _advance(views, sent)
    while views:
        views = _advance(views, sock.sendmsg(views[:_IOV_MAX]))


def send_small(sock: socket.socket, loop, call_id: int, kind: int, pickled: bytes) -> None:
    """Sends a frame without buffers in one write; ``loop``: the compiled frame loop (one
    ``sendmsg`` of header and pickle, no joined copy), None for Python's ``sendall``."""
    sent = 0
    if loop is not None:
        sent = loop.send_small(sock.fileno(), call_id, kind, pickled)
        if sent == _HEADER_SIZE + len(pickled):
            return
    _send_rest(sock, call_id, kind, pickled, sent)


def _send_rest(sock: socket.socket, call_id: int, kind: int, pickled: bytes, sent: int) -> None:
    """Sends a small frame from byte ``sent`` on (the compiled loop sent the bytes before:
    the socket has a timeout and would have blocked) with Python's ``sendall``."""
    frame = HEADER.pack(call_id, kind, 0, 0, len(pickled), 0, 0) + pickled
    sock.sendall(memoryview(frame)[sent:] if sent else frame)


class Outbox:
    """A connection's writing side: the lock its sends take and the small frames held back.

    Both socket connections (``uds``, ``tcp``) send through one, so holding and flushing
    work the same on both::

        outbox.small(call_id, REPLY, pickled, counts, hold=True)  # may wait for the next
        outbox.frame(parts, fd, counts)  # the held frames first, then this one
    """

    __slots__ = ('sock', 'loop', 'lock', 'held')

    def __init__(self, sock: socket.socket, loop):
        self.sock, self.loop = sock, loop
        self.lock = threading.Lock()
        self.held: list[bytes] = []

    def small(self, call_id: int, kind: int, pickled: bytes, counts, hold: bool) -> None:
        """Sends a frame without buffers; ``hold`` keeps it for the next write (more frames are
        about to follow), otherwise the held frames leave with it in one write, so a batch
        of quick frames costs the peer one wake-up instead of one each. ``counts``: its
        ``bytes_out`` grows by the frame's size, if given."""
        if counts is not None:
            counts.bytes_out += _HEADER_SIZE + len(pickled)
        with self.lock:
            held = self.held
            if not (hold or held):
                loop = self.loop  # send_small's branches inline, one Python call less.
                if loop is None:
                    self.sock.sendall(_pack_header(call_id, kind, 0, 0, len(pickled), 0, 0)
                                      + pickled)
                    return
                sent = loop.send_small(self.sock.fileno(), call_id, kind, pickled)
                if sent != _HEADER_SIZE + len(pickled):
                    _send_rest(self.sock, call_id, kind, pickled, sent)
                return
            held.append(HEADER.pack(call_id, kind, 0, 0, len(pickled), 0, 0) + pickled)
            if not hold:
                self._write_held()

    def frame(self, parts: list, fd: int | None, counts=None) -> None:
        """Sends an encoded frame (``encode_parts``), after the frames held back."""
        if counts is not None:
            counts.bytes_out += encoded_size(parts)
        with self.lock:
            self._write_held()
            send(self.sock, parts, fd)

    def flush(self) -> None:
        """Writes the frames held back, if any."""
        if self.held:
            with self.lock:
                self._write_held()

    def _write_held(self) -> None:
        held = self.held
        if held:  # Small frames only (see ``small``): joined, one part, no view per frame.
            data = b''.join(held)
            held.clear()
            send(self.sock, [data], None)


def _advance(views: list[memoryview], sent: int) -> list[memoryview]:
    index = 0
    while sent and sent >= views[index].nbytes:
        sent -= views[index].nbytes
        index += 1
    views = views[index:]
    if sent:
        views[0] = views[0][sent:]
    return views


def alloc(n: int):
    """Writable memory for a received buffer (contents undefined)."""
    if n < _MMAP_MIN:
        return bytearray(n)
    memory = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        memory.madvise(mmap.MADV_HUGEPAGE)
    except (AttributeError, OSError):
        pass
    return memory


class FrameError(ValueError):
    """A frame that cannot be valid (too large, or inconsistent); the connection must go."""


class Reader:
    """Reads frames from a stream socket, with their segment descriptors.

    ``descriptors=False`` (TCP, TLS) reads with plain ``recv_into``: no
    descriptors can come and none may be announced. ``max_frame_bytes``
    refuses a frame whose header claims more, before anything is allocated.
    """

    def __init__(self, sock: socket.socket, released: shm.ReleaseQueue | None,
                 scratch: int = 256 * 1024, *, descriptors: bool = True,
                 max_frame_bytes: int | None = None, on_released=None):
        self._sock = sock
        # Given the ids of our segments a frame says its sender released (uds: its pool's
        # ``release``), so a connection's ``read`` can be this reader's own.
        self._on_released = on_released
        #: The compiled frame loop this reader and its connection's sends use, or None.
        tls = isinstance(sock, ssl.SSLSocket)
        self.loop = None if tls else frame_loop.compiled()
        if self.loop is not None:  # Each frame then costs one Python call less.
            self.read = self._read_compiled
        #: Whether ``answer_and_read`` may be used (either loop; not over TLS, which keeps its
        #: sends on the connection's ``Outbox``).
        self.answers = not tls
        #: Compiled loop only: whether, after the frame ``read`` returned, another whole small
        #: frame is buffered (``has_small_frame``, answered by the read itself; False after a
        #: frame read in Python, which only means a reply is not held back).
        self.small_next = False
        self._descriptors = descriptors
        self._limit = max_frame_bytes
        # Frames read whole by the small-frame paths; a larger pickle takes the checked path.
        self._small_limit = sys.maxsize if max_frame_bytes is None else max_frame_bytes
        # Our mappings of the peer's segments, kept across frames (uds only).
        self._segments = None if released is None else shm.SegmentMappings(released)
        self._buf = bytearray(scratch)
        self._view = memoryview(self._buf)
        self._start = self._end = 0
        self._in_frame = False  # A header was read and its frame is not complete yet.
        self._fds: collections.deque[int] = collections.deque()
        self._ancillary = socket.CMSG_SPACE(16 * array.array('i').itemsize)

    def close(self) -> None:
        import os
        while self._fds:
            os.close(self._fds.popleft())
        if self._segments is not None:
            self._segments.close()

    def segment_statistics(self) -> dict:
        """How this reader mapped the peer's segments (``shm.SegmentMappings.statistics``)."""
        return {} if self._segments is None else self._segments.statistics()

    def _recv(self, target: memoryview) -> int:
        if not self._descriptors:
            n = self._sock.recv_into(target)
            if not n:
                raise EOFError('the peer closed the connection')
            return n
        n, ancdata, _, _ = self._sock.recvmsg_into([target], self._ancillary)
        if ancdata:
            self._keep_descriptors(ancdata)
        if not n:
            raise EOFError('the peer closed the connection')
        return n

    def _keep_descriptors(self, ancdata: list) -> None:
        """Queues the segment descriptors a receive brought (``SCM_RIGHTS``)."""
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds = array.array('i')
                fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
                self._fds.extend(fds)

    def _fill(self, n: int) -> None:
        """Ensures ``n`` unread bytes are in the scratch buffer."""
        if self._end - self._start >= n:
            return
        if self._start + n > len(self._buf):
            left = self._end - self._start
            if n > len(self._buf):
                bigger = bytearray(max(n, 2 * len(self._buf)))
                bigger[:left] = self._view[self._start:self._end]
                self._buf, self._view = bigger, memoryview(bigger)
            else:
                self._view[:left] = self._view[self._start:self._end]
            self._start, self._end = 0, left
        while self._end - self._start < n:
            self._end += self._recv(self._view[self._end:])

    def _take(self, n: int) -> memoryview:
        self._fill(n)
        view = self._view[self._start:self._start + n]
        self._start += n
        return view

    def _read_into(self, target: memoryview) -> None:
        n = target.nbytes
        have = min(n, self._end - self._start)
        target[:have] = self._view[self._start:self._start + have]
        self._start += have
        if n - have <= _SMALL_READ:
            target[have:] = self._take(n - have)
            return
        while have < n:
            have += self._recv(target[have:])

    def read(self) -> Frame:
        """The next frame (a compiled reader's ``read`` is ``_read_compiled``)."""
        start = self._start
        if start == self._end:  # Nothing buffered: one receive usually brings a whole call.
            start = self._start = 0
            # ``_recv`` inline: the pure loop runs this once per call, on both sides.
            if self._descriptors:
                n, ancdata, _, _ = self._sock.recvmsg_into([self._view], self._ancillary)
                if ancdata:
                    self._keep_descriptors(ancdata)
            else:
                n = self._sock.recv_into(self._view)
            if not n:
                raise EOFError('the peer closed the connection')
            self._end = n
        # A small frame (no buffers, nothing released, no segment) wholly here is the usual
        # reply; parsed inline, since the pure loop runs this once per call.
        end = self._end
        if end - start >= _HEADER_SIZE:
            call_id, kind, n_released, n_buffers, pickle_len, segment_id, _ = \
                _unpack_header(self._buf, start)
            begin = start + _HEADER_SIZE
            stop = begin + pickle_len
            if not (stop > end or n_released or n_buffers or segment_id
                    or pickle_len > self._small_limit):
                self._start = stop
                return Frame(call_id, kind, self._buf[begin:stop], (), ())
        return self._read_frame()

    def take_replies(self, pending: dict, settle: tuple | None = None) -> list[tuple]:
        """The replies received so far (at least one frame is read), matched to ``pending``.

        Every reply whose call id ``pending`` holds is popped from it and returned as
        ``(entry, pickled, buffers)``; replies to calls no longer pending are dropped (so
        the list may be empty: the caller looks again at what it waits for). The compiled
        loop takes all small replies received in one call (``_cframes.take_replies``), the
        pure one parses them in place; any other frame is read by ``_read_frame``.
        ``settle`` (``futures_connection``'s): the compiled loop completes the futures it
        can itself and leaves them out; an entry it unpickled but left to Python comes as
        ``(entry, outcome, None)``. The pure loop ignores it.
        """
        replies: list[tuple] = []
        if self.loop is not None:
            replies, self._start, self._end, fds, status, settled = self.loop.take_replies(
                self._sock.fileno(), self._buf, self._start, self._end, self._descriptors,
                self._small_limit, pending, settle)
            if fds:
                self._fds.extend(fds)
            if status == _TAKEN or replies or settled:
                return replies
            if status == _STREAM_ENDED:
                raise EOFError('the peer closed the connection')
        elif self._take_buffered(pending, replies):
            return replies
        elif self._start == self._end:  # Nothing buffered: one receive usually brings them.
            self._start = self._end = 0
            self._end = self._recv(self._view)
            if self._take_buffered(pending, replies):
                return replies
        frame = self._read_frame()  # Another kind of frame, or a small one not whole yet.
        entry = pending.pop(frame.call_id, None)
        if entry is not None:
            replies.append((entry, frame.pickled, frame.buffers))
        if self.loop is None:
            self._take_buffered(pending, replies)
        return replies

    def _take_buffered(self, pending: dict, replies: list) -> bool:
        """Takes the small frames wholly buffered (as ``take_replies``); whether there were any."""
        first = start = self._start
        buf, end, limit = self._buf, self._end, self._small_limit
        while end - start >= _HEADER_SIZE:  # Small frames, parsed inline as in ``read``.
            call_id, _, n_released, n_buffers, pickle_len, segment_id, _ = \
                _unpack_header(buf, start)
            begin = start + _HEADER_SIZE
            stop = begin + pickle_len
            if stop > end or n_released or n_buffers or segment_id or pickle_len > limit:
                break
            entry = pending.pop(call_id, None)  # Atomic: whoever pops it completes it.
            if entry is not None:
                replies.append((entry, buf[begin:stop], ()))
            start = stop
        self._start = start
        return start != first

    def _read_compiled(self) -> Frame:
        """The compiled loop receives a small frame; any other is read on in Python."""
        pickled, call_id, kind, self._start, self._end, fds, eof, self.small_next = \
            self.loop.recv_small(
                self._sock.fileno(), self._buf, self._start, self._end, self._descriptors,
                self._small_limit)
        if fds:
            self._fds.extend(fds)
        if pickled is not None:
            return Frame(call_id, kind, pickled, [], [])
        if eof:
            raise EOFError('the peer closed the connection')
        return self._read_frame()

    def answer_and_read(self, call_id: int, kind: int, pickled: bytes) -> Frame:
        """Sends a small frame on this reader's socket, then reads the next frame; the
        compiled loop sends and starts receiving in one release of the GIL, the pure one
        writes without the connection's ``Outbox`` (no lock, two Python calls less). Only
        for a socket whose reader is its only writer (see ``socket_serving.py``), and where
        ``answers`` says so."""
        if self.loop is None:
            self._sock.sendall(_pack_header(call_id, kind, 0, 0, len(pickled), 0, 0) + pickled)
            return self.read()
        sent, read = self.loop.answer_small(
            self._sock.fileno(), call_id, kind, pickled, self._buf, self._start, self._end,
            self._descriptors, self._small_limit)
        if read is None:  # The send stopped short: the rest goes Python's way.
            _send_rest(self._sock, call_id, kind, pickled, sent)
            return self.read()
        pickled, call_id, kind, self._start, self._end, fds, _, self.small_next = read
        if fds:
            self._fds.extend(fds)
        if pickled is not None:
            return Frame(call_id, kind, pickled, [], [])
        return self.read()  # Another kind of frame, or the stream ended: read says which.

    def _read_frame(self) -> Frame:
        """Any frame, its parts received as they come (large buffers straight into place)."""
        call_id, kind, n_released, n_buffers, pickle_len, segment_id, segment_size = \
            HEADER.unpack(self._take(HEADER.size))
        self._in_frame = True
        if self._limit is not None:
            self._check(n_released, n_buffers, pickle_len, segment_id)
        position = HEADER.size + 8 * n_released + _ENTRY.size * n_buffers + pickle_len
        released = list(struct.unpack(f'<{n_released}Q', self._take(8 * n_released))) \
            if n_released else []
        entries = [_ENTRY.unpack(self._take(_ENTRY.size)) for _ in range(n_buffers)]
        if self._limit is not None and (
                any(offset != -1 for offset, _ in entries)
                or pickle_len + sum(length + _BUFFER_ALIGN for _, length in entries) > self._limit):
            raise FrameError(f'a frame announced buffers beyond the limit of {self._limit} bytes '
                             'or in shared memory')
        if pickle_len <= _SMALL_READ:
            pickled = bytes(self._take(pickle_len))
        else:
            pickled = alloc(pickle_len)
            self._read_into(memoryview(pickled))
        buffers = []
        for offset, length in entries:
            if offset < 0:
                self._take(_padding(position))
                position += _padding(position) + length
                memory = alloc(length)
                self._read_into(memoryview(memory))
                buffers.append(memory)
            else:
                buffers.append(None)
        if released:
            self._take_released(released)
        if segment_id:
            if not self._fds or self._segments is None:  # Over TCP none can come.
                raise EOFError('a frame announced a shared-memory segment but carried none')
            segment = self._segments.view(self._fds.popleft(), segment_size, segment_id)
            buffers = [segment[offset:offset + length] if buffer is None else buffer
                       for buffer, (offset, length) in zip(buffers, entries)]
        self._in_frame = False
        return Frame(call_id, kind, pickled, buffers, released)

    def _take_released(self, released: list[int]) -> None:
        """Our segments the peer released go to ``on_released``; its notices of segments it
        closed (``shm.DROPPED``) make us forget our mappings of them."""
        ours = released
        if any(i & shm.DROPPED for i in released):
            ours = [i for i in released if not i & shm.DROPPED]
            if self._segments is not None:
                for notice in released:
                    if notice & shm.DROPPED:
                        self._segments.forget(notice & ~shm.DROPPED)
        if ours and self._on_released is not None:
            self._on_released(ours)

    def has_small_frame(self) -> bool:
        """Whether a whole frame without buffers waits in the scratch buffer (read at no cost)."""
        start = self._start
        if self._end - start < HEADER.size:
            return False
        _, _, n_released, n_buffers, pickle_len, segment_id, _ = HEADER.unpack_from(
            self._buf, start)
        return (not (n_released or n_buffers or segment_id)
                and self._end - start - HEADER.size >= pickle_len)

    @property
    def buffered(self) -> bool:
        """Whether bytes already received wait to be read (a read may start without waiting)."""
        return self._end > self._start

    @property
    def truncated(self) -> bool:
        """After an EOFError: whether the peer left in the middle of a frame."""
        return self._in_frame or self._end > self._start

    def _check(self, n_released: int, n_buffers: int, pickle_len: int, segment_id: int) -> None:
        """Refuses a header no honest peer of a network connection sends."""
        if n_released or segment_id:
            raise FrameError('a network frame announced shared memory')
        if pickle_len + _ENTRY.size * n_buffers > self._limit:
            raise FrameError(f'a frame announced {pickle_len} pickle bytes and {n_buffers} '
                             f'buffers, beyond the limit of {self._limit} bytes')
