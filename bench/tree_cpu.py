"""CPU time of a launch: the launching process and every process below it, load aside.

Ready times on a shared machine move with the load (other work takes the cores, the
launch waits), but the CPU seconds the launch itself spends barely do: so "is launch
cost flat per node?" is asked of CPU per node beside wall time per node.

    cpu = TreeCpu(exclude_pids={sampler.pid})
    controller = lp.launch(program)
    spent = cpu.read()   # {'cpu_s', 'launcher_cpu_s', 'nodes_cpu_s', ...}

``launcher_cpu_s`` is the launching process (all its threads; for ``local_mt`` the nodes
too). ``nodes_cpu_s`` is every process below it (fork server, node processes, reaped or
alive) but ``exclude_pids`` (processes of the benchmark's own that are no part of the
launch: bench/uss_sampler.py), read from /proc at ``read()``; alive nodes keep running
while they are read, which the time the reading took (``read_s``) bounds.
"""

from __future__ import annotations

import gc
import os
import time

import psutil


def _own_cpu() -> float:
    times = os.times()
    return times.user + times.system


def _reaped_cpu() -> float:
    times = os.times()
    return times.children_user + times.children_system


def _threads_cpu(pid: int) -> float:
    """The CPU of ``pid``'s live threads from their schedstat, in nanoseconds (0 if gone)."""
    total = 0
    for tid in os.listdir(f'/proc/{pid}/task'):
        try:
            with open(f'/proc/{pid}/task/{tid}/schedstat') as f:
                total += int(f.read().split(None, 1)[0])
        except (FileNotFoundError, ProcessLookupError, ValueError):
            pass
    return total / 1e9


def _process_cpu(process: psutil.Process) -> float:
    """A process's CPU with its reaped children's (a fork server's ended nodes).

    ``/proc/PID/stat`` (psutil's ``cpu_times``) gives user and system time in clock ticks,
    each rounded down: about 10 ms lost per process, as much as a node spends until ready
    (20 node processes: 3.5 ms each from it, 11.9 ms from their threads' schedstat). So a
    process's own CPU is the larger of that and its live threads' schedstat (nanoseconds;
    it misses threads that ended, which the ticks count).
    """
    t = process.cpu_times()
    try:
        own = max(t.user + t.system, _threads_cpu(process.pid))
    except FileNotFoundError:
        own = t.user + t.system
    return own + t.children_user + t.children_system


def _below(me: psutil.Process, exclude_pids: frozenset[int]) -> dict[int, float]:
    spent = {}
    for process in me.children(recursive=True):
        if process.pid in exclude_pids:
            continue
        try:
            spent[process.pid] = _process_cpu(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return spent


class GcTime:
    """Collections and the seconds they took in this process (``gc.callbacks``) while open."""

    def __init__(self):
        self.collections = [0, 0, 0]
        self.seconds = 0.0
        self._started: float | None = None
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == 'start':
            self._started = time.perf_counter()
        elif self._started is not None:
            self.seconds += time.perf_counter() - self._started
            self.collections[info['generation']] += 1
            self._started = None

    def close(self) -> dict:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)
        return {'gc_collections': self.collections, 'gc_s': self.seconds}


class TreeCpu:
    """CPU spent by this process and its descendants since it was made."""

    def __init__(self, exclude_pids=frozenset()):
        self._me = psutil.Process()
        self._exclude = frozenset(exclude_pids)
        self._own = _own_cpu()
        self._reaped = _reaped_cpu()
        self._below = _below(self._me, self._exclude)  # Normally none: a launch starts its own.

    def read(self) -> dict:
        start = time.perf_counter()
        launcher = _own_cpu() - self._own
        below = _below(self._me, self._exclude)
        nodes = _reaped_cpu() - self._reaped + sum(
            spent - self._below.get(pid, 0.0) for pid, spent in below.items())
        return {'cpu_s': launcher + nodes, 'launcher_cpu_s': launcher, 'nodes_cpu_s': nodes,
                'processes_below': len(below), 'read_s': time.perf_counter() - start}
