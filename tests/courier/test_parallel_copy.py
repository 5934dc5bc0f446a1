"""Large copies into shared memory split across threads (``courier/parallel_copy.py``).

The copy must be exact at any offset and size, leave nothing exported from the target
(a segment's mapping is closed when its pool trims it), split only large copies, leave
no thread running, and work in a child forked after the parent copied.
"""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
import textwrap
import threading
import types

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

    monkeypatch.setattr(parallel_copy, 'threading', types.SimpleNamespace(Thread=Counted))
    target = mmap.mmap(-1, parallel_copy.PARALLEL_MIN)
    parallel_copy.copy_into(target, 0, memoryview(_source(parallel_copy.PARALLEL_MIN - 1)))
    assert started == []
    parallel_copy.copy_into(target, 0, memoryview(_source(parallel_copy.PARALLEL_MIN)))
    assert len(started) == parallel_copy.threads_available() - 1 >= 1
    assert not any(thread.is_alive() for thread in started)


def test_a_copy_with_no_thread_to_be_had_is_still_whole(monkeypatch):
    # A process at its thread limit: the parts a helper cannot take are copied by the caller.
    class Refused(threading.Thread):
        def start(self):
            raise RuntimeError("can't start new thread")

    monkeypatch.setattr(parallel_copy, 'threading', types.SimpleNamespace(Thread=Refused))
    monkeypatch.setattr(parallel_copy, 'threads_available', lambda: parallel_copy.MAX_THREADS)
    source = _source(parallel_copy.PARALLEL_MIN + 4097, seed=3)
    target = mmap.mmap(-1, source.nbytes)
    parallel_copy.copy_into(target, 0, memoryview(source))
    assert np.array_equal(np.frombuffer(target, np.uint8), source)


@needs_two_cpus
def test_a_forked_child_copies_after_its_parent_did():
    # A child forked after the parent's large copies has none of the parent's threads: a
    # pool of helpers kept between copies would leave it waiting for parts never copied.
    # Forked from a fresh interpreter, not from this test process and its threads.
    script = textwrap.dedent('''
        import mmap, os, sys
        import numpy as np
        from launchpad_py.courier import parallel_copy
        def copy(seed):
            source = np.random.default_rng(seed).integers(
                0, 256, parallel_copy.PARALLEL_MIN + 64, dtype=np.uint8)
            target = mmap.mmap(-1, source.nbytes)
            parallel_copy.copy_into(target, 0, memoryview(source))
            return bool(np.array_equal(np.frombuffer(target, np.uint8), source))
        assert copy(1)
        pid = os.fork()
        if pid == 0:
            os._exit(0 if copy(2) else 1)
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status))
    ''')
    subprocess.run([sys.executable, '-c', script], timeout=120, check=True)


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
