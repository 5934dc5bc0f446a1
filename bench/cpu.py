"""CPU time and context switches of the processes on both sides of a call.

Wall clock on a shared 2-core machine swings with whatever else runs; the CPU
a call costs does not (much).  A :class:`CpuMeter` takes a snapshot of the
calling process (``getrusage``: every thread, live or ended) and of each
server process (``/proc``, see below)
before and after a repetition; the difference over the calls made is the
cost per call.  Kernel time spent on a process's behalf is in both sources.

A server process's CPU comes from ``/proc/<pid>/stat`` (every thread, ended
ones included, in clock ticks: 10 ms, so about 1 us per call over a 0.4 s
window of ~8,000 calls); summing the live threads' nanosecond ``schedstat``
instead went backwards when a server thread ended inside the window.  Its
context switches are counted per live thread (Linux keeps no process total)
and a window takes each thread's growth: a thread that ends inside the
window is missing from it (its switches there are lost, not subtracted, so
the count never goes negative), one that starts inside it counts whole.

    meter = CpuMeter([server_pid])
    before = meter.snapshot()
    ...  # n calls
    cpu_us, switches = meter.per_call(before, meter.snapshot(), n)
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass, field

_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Usage:
    """CPU seconds and context switches (voluntary + involuntary).

    ``switches`` are totals that never fall (``getrusage``, or a difference);
    ``tasks`` are another process's live threads' switches by thread id,
    which a difference takes thread by thread (see the module docstring).
    """

    cpu_s: float = 0.0
    switches: int = 0
    tasks: dict = field(default_factory=dict)

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.cpu_s + other.cpu_s, self.switches + other.switches,
                     {**self.tasks, **other.tasks})

    def __sub__(self, other: Usage) -> Usage:
        grown = 0
        for tid, n in self.tasks.items():
            before = other.tasks.get(tid, 0)
            grown += n - before if n >= before else n  # Smaller: a new thread got a reused id.
        return Usage(self.cpu_s - other.cpu_s, self.switches - other.switches + grown)


def self_usage() -> Usage:
    """Every thread of this process, ended ones included."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return Usage(ru.ru_utime + ru.ru_stime, ru.ru_nvcsw + ru.ru_nivcsw)


def _process_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _task_switches(task_dir: str) -> int:
    n = 0
    with open(f"{task_dir}/status") as f:
        for line in f:
            if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                n += int(line.split()[1])
    return n


def process_usage(pid: int) -> Usage:
    """Another process: CPU of all its threads, switches of the live ones."""
    base = f"/proc/{pid}/task"
    try:
        cpu, tids = _process_cpu_s(pid), os.listdir(base)
    except OSError:
        return Usage()
    tasks = {}
    for tid in tids:
        try:
            tasks[int(tid)] = _task_switches(f"{base}/{tid}")
        except OSError:  # the thread ended between listdir and read
            continue
    return Usage(cpu, 0, tasks)


class CpuMeter:
    """Snapshots of this process plus ``pids`` (the server side of the calls)."""

    def __init__(self, pids=(), include_self: bool = True):
        self.pids = [p for p in pids if p and p != os.getpid()]
        self.include_self = include_self

    def snapshot(self) -> Usage:
        total = self_usage() if self.include_self else Usage()
        for pid in self.pids:
            total += process_usage(pid)
        return total

    @staticmethod
    def per_call(before: Usage, after: Usage, calls: int, extra: Usage = Usage()):
        """(CPU microseconds, context switches) per call over the window."""
        d = after - before + extra
        calls = max(calls, 1)
        return d.cpu_s / calls * 1e6, d.switches / calls
