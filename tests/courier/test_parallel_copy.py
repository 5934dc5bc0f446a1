"""Large copies into shared memory split across threads (``courier/parallel_copy.py``).

The copy must be exact at any offset and size, leave nothing exported from the target
(a segment's mapping is closed when its pool trims it), split only large copies, leave
no thread running, and work in a child forked after the parent copied.
"""

from __future__ import annotations

import mmap
import multiprocessing
import os
import threading

import numpy as np
import pytest

from launchpad_py.courier import parallel_copy, shm

MANY_CPUS = len(os.sched_getaffinity(0)) > 1
needs_two_cpus = pytest.mark.skipif(not MANY_CPUS, reason='one CPU: copies never split')


def _source(nbytes: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)


@pytest.mark.parametrize('nbytes', [1, 63, 4097, (1 << 20) + 3, 3 * (1 << 20) + 65])
@pytest.mark.parametrize('offset', [0, 64, 4096])
def test_every_byte_lands_at_its_offset(monkeypatch, nbytes, offset):
    # Small sizes split too, so parts with odd ends are exercised without copying GiBs.
    monkeypatch.setattr(parallel_copy, 'PARALLEL_MIN', 0)
    monkeypatch.setattr(parallel_copy, 'PART_MIN', 1)
    target = mmap.mmap(-1, offset + nbytes + 4096)
    target[:] = b'\xee' * len(target)
    source = _source(nbytes)
    parallel_copy.copy_into(target, offset, memoryview(source))
    got = np.frombuffer(target, np.uint8)
    assert np.array_equal(got[offset:offset + nbytes], source)
    assert (got[:offset] == 0xEE).all() and (got[offset + nbytes:] == 0xEE).all()
    del got
    target.close()


def test_a_large_copy_of_another_dtype_is_exact():
    source = np.arange((parallel_copy.PARALLEL_MIN + 4100) // 4, dtype=np.float32)
    target = mmap.mmap(-1, source.nbytes + 128)
    parallel_copy.copy_into(target, 64, memoryview(source))
    assert np.array_equal(np.frombuffer(target, np.float32, source.size, 64), source)


def test_the_target_can_be_closed_as_soon_as_the_copy_returns():
    # A helper that still held its part of the target would make close() raise BufferError.
    source = memoryview(_source(parallel_copy.PARALLEL_MIN + 1))
    for _ in range(20):
        target = mmap.mmap(-1, source.nbytes)
        parallel_copy.copy_into(target, 0, source)
        target.close()


@needs_two_cpus
def test_only_large_copies_split_and_no_copy_thread_outlives_its_copy(monkeypatch):
    started = []

    class Counted(threading.Thread):
        def start(self):
            started.append(self)
            super().start()

    monkeypatch.setattr(parallel_copy.threading, 'Thread', Counted)
    target = mmap.mmap(-1, parallel_copy.PARALLEL_MIN)
    parallel_copy.copy_into(target, 0, memoryview(_source(parallel_copy.PARALLEL_MIN - 1)))
    assert started == []
    parallel_copy.copy_into(target, 0, memoryview(_source(parallel_copy.PARALLEL_MIN)))
    assert len(started) == parallel_copy.threads_available() - 1 >= 1
    assert not any(thread.is_alive() for thread in started)


def _copy_in_child(queue) -> None:
    source = _source(parallel_copy.PARALLEL_MIN + 64, seed=7)
    target = mmap.mmap(-1, source.nbytes)
    parallel_copy.copy_into(target, 0, memoryview(source))
    queue.put(bool(np.array_equal(np.frombuffer(target, np.uint8), source)))


@needs_two_cpus
def test_a_forked_child_copies_with_helpers_of_its_own():
    # A child forked after the parent's large copies has none of the parent's threads: a
    # pool of helpers kept between copies would leave it waiting for parts never copied.
    parallel_copy.copy_into(mmap.mmap(-1, parallel_copy.PARALLEL_MIN), 0,
                            memoryview(_source(parallel_copy.PARALLEL_MIN)))
    context = multiprocessing.get_context('fork')
    queue = context.Queue()
    child = context.Process(target=_copy_in_child, args=(queue,))
    child.start()
    try:
        assert queue.get(timeout=60) is True
    finally:
        child.join(30)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0


def test_a_segment_written_in_parts_reads_back_whole():
    pool = shm.SegmentPool()
    try:
        first, second = _source(parallel_copy.PARALLEL_MIN + 5, 1), _source(1000, 2)
        segment_id, fd, size, offsets = pool.write([memoryview(first), memoryview(second)])
        view = mmap.mmap(fd, size, prot=mmap.PROT_READ)
        data = np.frombuffer(view, np.uint8)
        assert np.array_equal(data[offsets[0]:offsets[0] + first.nbytes], first)
        assert np.array_equal(data[offsets[1]:offsets[1] + second.nbytes], second)
        del data
        view.close()
        pool.release([segment_id])
    finally:
        pool.close()
