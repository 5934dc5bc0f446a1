"""The frame loops of the socket paths: compiled (``_cframes``) and pure Python read and
write the same frames, whichever way the bytes arrive; ``LP_COURIER_PURE=1`` picks pure."""

from __future__ import annotations

import importlib
import os
import socket
import threading
import types

import numpy as np
import pytest
from frame_loops import loop  # noqa: F401 (the fixture)

from launchpad_py import courier
from launchpad_py.courier import frame_loop, frames, serialization, shm

def _pair(descriptors: bool = True):
    left, right = socket.socketpair()
    return left, right, frames.Reader(right, shm.ReleaseQueue(), scratch=4096,
                                      descriptors=descriptors)


def _small(call_id: int, obj) -> bytes:
    parts, fd = frames.encode(call_id, frames.REPLY, obj)
    assert fd is None and len(parts) == 1
    return parts[0]


def test_compiled_loop_is_built_and_chosen_unless_pure_is_asked(monkeypatch):
    """``pip install`` builds the compiled loop (gcc and Python's headers are all it needs);
    it is the default, and ``LP_COURIER_PURE=1`` turns it off for connections opened then."""
    monkeypatch.delenv(frame_loop.PURE_ENV, raising=False)
    assert frame_loop.compiled() is not None, (
        'launchpad_py.courier._cframes is not built: reinstall with a C compiler and the '
        'Python headers (pip install -e .), e.g. apt install gcc python3-dev')
    assert frame_loop.active() == 'compiled'
    monkeypatch.setenv(frame_loop.PURE_ENV, '1')
    assert frame_loop.active() == 'pure'
    left, right, reader = _pair()
    try:
        assert reader.loop is None
    finally:
        left.close(), right.close()
    monkeypatch.setenv(frame_loop.PURE_ENV, '0')
    assert frame_loop.active() == 'compiled'


def test_a_compiled_loop_built_from_other_sources_is_not_used(monkeypatch):
    """A ``_cframes`` of another API (a stale build beside newer Python) is refused with a
    warning that says how to rebuild, and the pure loop runs, instead of failing its reads."""
    stale = types.ModuleType('_cframes')  # Built before API_VERSION existed: version 1.
    stale.__file__ = '/stale/_cframes.so'
    real = importlib.import_module
    monkeypatch.setattr(importlib, 'import_module',
                        lambda name, *a: stale if name.endswith('._cframes') else real(name, *a))
    monkeypatch.delenv(frame_loop.PURE_ENV, raising=False)
    try:
        with pytest.warns(RuntimeWarning, match=f'API 1, this code needs {frame_loop.API_VERSION}'
                                                '.*build_ext --inplace'):
            importlib.reload(frame_loop)
        assert frame_loop.compiled() is None and frame_loop.active() == 'pure'
    finally:
        monkeypatch.undo()
        importlib.reload(frame_loop)  # The real build again, for the tests after this one.


def test_a_frame_split_anywhere_is_read_whole(loop):
    """A small frame arriving in pieces (inside the header, inside the pickle) reads whole,
    and two frames in one send come out as two."""
    first, second = _small(7, ('ok', 'x' * 100)), _small(8, ('ok', 2))
    left, right, reader = _pair()
    try:
        for cut in (3, 39, 41, len(first) - 1):
            left.sendall(first[:cut])
            left.sendall(first[cut:] + second)
            frame = reader.read()
            assert (frame.call_id, frame.value()) == (7, ('ok', 'x' * 100))
            frame = reader.read()
            assert (frame.call_id, frame.kind, frame.value()) == (8, frames.REPLY, ('ok', 2))
        assert not reader.buffered
    finally:
        left.close(), right.close()


def test_small_and_large_frames_interleave(loop):
    """A frame with buffers after a small one, and a small one after it, all read right
    (the compiled loop hands the large frame to Python mid-buffer)."""
    array = np.arange(100_000, dtype=np.float32)
    parts, _ = frames.encode(2, frames.REPLY, ('ok', array))
    left, right, reader = _pair(descriptors=False)
    def write():  # More than the socket holds: written while the reader reads.
        frames.send(left, [_small(1, 'a')] + parts, None)
        left.sendall(_small(3, 'b'))

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert reader.read().value() == 'a'
        big = reader.read()
        assert big.call_id == 2
        np.testing.assert_array_equal(big.value()[1], array)
        assert reader.read().value() == 'b'
    finally:
        writer.join(timeout=30)
        left.close(), right.close()


def test_end_of_stream_says_whether_a_frame_was_cut(loop):
    """The peer closing between frames is a clean end; closing inside one is truncation."""
    frame = _small(1, 'whole')
    left, right, reader = _pair()
    left.sendall(frame + frame[:20])
    left.close()
    try:
        assert reader.read().value() == 'whole'
        with pytest.raises(EOFError):
            reader.read()
        assert reader.truncated
    finally:
        right.close()
    left, right, reader = _pair()
    left.close()
    try:
        with pytest.raises(EOFError):
            reader.read()
        assert not reader.truncated
    finally:
        right.close()


def test_a_small_frame_over_the_frame_limit_is_refused(loop):
    """``max_frame_bytes`` holds for frames the small-frame paths would read whole too."""
    left, right = socket.socketpair()
    reader = frames.Reader(right, None, descriptors=False, max_frame_bytes=100)
    try:
        left.sendall(_small(1, 'x' * 50) + _small(2, 'y' * 200))
        assert reader.read().value() == 'x' * 50
        with pytest.raises(frames.FrameError):
            reader.read()
    finally:
        left.close(), right.close()


def test_a_socket_with_a_timeout_still_reads_and_times_out(loop):
    """A socket with a timeout (a sync call with a deadline) is non-blocking underneath: the
    compiled loop leaves the wait to Python, which reads the frame or times out."""
    left, right, reader = _pair()
    right.settimeout(0.05)
    try:
        with pytest.raises(TimeoutError):
            reader.read()
        left.sendall(_small(5, 'late'))
        assert reader.read().value() == 'late'
    finally:
        left.close(), right.close()


def test_send_small_writes_the_same_bytes_either_way(loop):
    """``send_small`` (one sendmsg when compiled) puts exactly ``encode``'s frame on the wire."""
    left, right, reader = _pair()
    try:
        pickled, buffers = serialization.encode(('echo', (1,), {}))
        assert not buffers
        frames.send_small(left, reader.loop, 2**40 + 3, frames.REQUEST, pickled)
        expected = _small(2**40 + 3, ('echo', (1,), {}))
        expected = expected[:8] + bytes([frames.REQUEST]) + expected[9:]
        assert right.recv(4096) == expected
    finally:
        left.close(), right.close()


def test_calls_and_shared_memory_work_on_each_loop(loop):
    """A server and client both on one loop: small calls, futures, an error, and an array
    large enough for shared memory (its descriptor read by that loop)."""
    class Service:
        def echo(self, value):
            return value

        def fail(self):
            raise KeyError('no such key')

    array = np.ones(1 << 20, dtype=np.float32)
    with courier.Server(Service()) as server:
        client = courier.Client(server.address)
        assert client.echo(1) == 1
        assert [client.futures.echo(i).result(timeout=30) for i in range(20)] == list(range(20))
        with pytest.raises(KeyError):
            client.fail()
        np.testing.assert_array_equal(client.echo(array), array)
        assert client.echo('after') == 'after'
    assert os.environ.get(frame_loop.PURE_ENV) == ('1' if loop == 'pure' else None)


def test_a_compiled_read_says_whether_a_whole_small_frame_follows():
    """After each read the compiled reader's ``small_next`` says what ``has_small_frame``
    says: a whole small frame buffered behind it (yes), half of one or nothing (no)."""
    if frame_loop.compiled() is None:
        pytest.skip('the compiled loop is not built (the first test of this file fails)')
    first, second, third = _small(1, ('ok', 1)), _small(2, ('ok', 2)), _small(3, ('ok', 3))
    left, right, reader = _pair()
    try:
        assert reader.loop is not None
        left.sendall(first + second + third[:20])
        seen = []
        for _ in range(2):
            frame = reader.read()
            seen.append((frame.call_id, reader.small_next, reader.has_small_frame()))
        left.sendall(third[20:])
        frame = reader.read()
        seen.append((frame.call_id, reader.small_next, reader.has_small_frame()))
        assert seen == [(1, True, True), (2, False, False), (3, False, False)]
    finally:
        left.close(), right.close()
