"""bench.uss_sampler: peak USS of a process tree, taking only idle CPU until the launch is ready."""

import os
import subprocess
import sys

from bench.tree_cpu import TreeCpu
from bench.uss_sampler import UssSampler

# A child that writes 64 MiB of its own memory, says so, and waits for its stdin to close.
_CHILD = 'import sys; b = bytearray(64 * 2**20); print("held", flush=True); sys.stdin.read()'


def _children(count: int) -> list[subprocess.Popen]:
    children = [subprocess.Popen([sys.executable, '-c', _CHILD], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True) for _ in range(count)]
    for child in children:
        assert child.stdout.readline() == 'held\n'
    return children


def _end(children: list[subprocess.Popen]) -> None:
    for child in children:
        child.stdin.close()
        child.wait(timeout=30)


def test_sampler_takes_only_idle_cpu_until_ready_then_the_normal_policy():
    """Until ready the sampler runs under SCHED_IDLE, so it takes no core from the launch it
    measures; after ready it samples at the normal policy, so the peak is not missed."""
    sampler = UssSampler(os.getpid())
    try:
        assert os.sched_getscheduler(sampler.pid) == os.SCHED_IDLE
        sampler.ready()
        result = sampler.stop()
    finally:
        sampler._process.kill()
    assert result['passes'] >= 2  # At least the first pass and the one at ready.
    assert result['cpu_s'] > 0


def test_at_ready_pass_counts_every_child():
    """The pass at ready sums the unique memory of every process below the root (3 x 64 MiB
    written here), so a launch's nodes are in the peak."""
    children = _children(3)
    try:
        sampler = UssSampler(os.getpid())
        sampler.ready()
        result = sampler.stop()
    finally:
        _end(children)
    assert result['uss_at_ready'] >= 3 * 64 * 2**20
    assert result['peak_uss'] >= result['uss_at_ready']


def test_peak_counts_each_process_at_its_largest_even_if_no_pass_saw_all():
    """A process read in one pass and gone by the next still counts: the peak is each
    process's largest USS summed (a pass over 1,000 nodes outlasts the program's end)."""
    first = _children(1)
    try:
        sampler = UssSampler(os.getpid())  # Returns after a first pass, which read it.
    finally:
        _end(first)
    second = _children(1)
    try:
        sampler.ready()
        result = sampler.stop()
    finally:
        _end(second)
    assert result['peak_uss'] >= 2 * 64 * 2**20
    assert result['processes_seen'] >= 3  # This process and both children.
    assert result['peak_uss_of_one_pass'] < result['peak_uss']


def test_tree_cpu_leaves_out_the_sampler_process():
    """CPU read below the launching process excludes the sampler's pid, so what the sampler
    costs is not counted as the nodes'."""
    sampler = UssSampler(os.getpid())
    try:
        cpu = TreeCpu(exclude_pids={sampler.pid})
        assert cpu.read()['processes_below'] == 0
        assert TreeCpu().read()['processes_below'] == 1
    finally:
        sampler.stop()
