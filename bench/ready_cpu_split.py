"""Where a local_mp node's CPU until ready goes: its own start, or waiting for the others.

    python -m bench.ready_cpu_split --nodes 300,1000,2000 --json /tmp/split.json

For each size, launches N counters whose object notes, when it is built (just after its
server listens and the node reported ready), the process's CPU time
(``CLOCK_PROCESS_CPUTIME_ID``: every thread, nanoseconds, 0 at the fork) and the wall
clock. When ``lp.launch`` returns, each node's CPU is read from ``/proc/PID/task/*/schedstat``
(nanoseconds, its live threads) and each node is then asked what it noted. Per node:

- start CPU: fork to listening (what the node noted);
- waiting CPU: listening to the launch's ready (CPU at ready minus the noted CPU), with the
  seconds it waited, and their ratio (idle CPU per second of waiting);
- by decile of the nodes in the order they were built: the mean start and waiting CPU;
  their user and system CPU (ticks); their page faults (major ones: pages read back from disk, reclaim under memory pressure);
- the kernel's reclaim counters over the launch (``/proc/vmstat``: direct reclaim stalls);
- ``proc_stat_ms``: the same CPU at ready as ``/proc/PID/stat`` gives it (utime + stime in
  clock ticks, each rounded down: what ``bench/tree_cpu.py`` reads through psutil).

If idle waiting explains the growth of the nodes' CPU per node with N, the waiting CPU
grows with N (nodes started early wait for the whole launch) while the start CPU stays flat.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import pathlib
import statistics
import sys
import time

import psutil

import launchpad_py as lp
from bench.scale_nodes import Counter

_TICK = os.sysconf('SC_CLK_TCK')


class NotingCounter(Counter):
    """A counter that notes its process's CPU and the time when it is built."""

    def __init__(self):
        super().__init__()
        self.built = (time.process_time(), time.time())

    def noted(self):
        return self.built


def _schedstat_s(pid: int) -> float | None:
    """CPU seconds of the live threads of ``pid`` (None if it is gone)."""
    total = 0
    for path in glob.glob(f'/proc/{pid}/task/*/schedstat'):
        try:
            with open(path) as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total / 1e9 if total else None


def _proc_stat(pid: int) -> tuple[float, int, int, float, float]:
    """CPU seconds from ``/proc/PID/stat`` (ticks), its minor and major page faults, its user
    and system seconds."""
    with open(f'/proc/{pid}/stat') as f:
        fields = f.read().rsplit(')', 1)[1].split()
    user, system = int(fields[11]) / _TICK, int(fields[12]) / _TICK
    return user + system, int(fields[7]), int(fields[9]), user, system


_VMSTAT = ('allocstall_normal', 'allocstall_movable', 'pgscan_direct', 'pgscan_kswapd',
           'pgmajfault', 'compact_stall')


def _vmstat() -> dict[str, int]:
    """The kernel's reclaim counters (direct reclaim stalls, pages scanned)."""
    with open('/proc/vmstat') as f:
        pairs = (line.split() for line in f)
        return {name: int(value) for name, value in pairs if name in _VMSTAT}


def _deciles(order: list[float], values: list[float]) -> list[float]:
    """Means of ``values`` over ten groups of nodes, by ``order`` (when each was built)."""
    ranked = [v for _, v in sorted(zip(order, values))]
    size = max(1, len(ranked) // 10)
    return [round(1000 * statistics.fmean(ranked[i:i + size]), 2)
            for i in range(0, size * 10, size) if ranked[i:i + size]]


def _summary(values: list[float], scale: float = 1000.0) -> dict:
    return {'mean': round(scale * statistics.fmean(values), 3),
            'median': round(scale * statistics.median(values), 3),
            'max': round(scale * max(values), 3)}


def measure(nodes: int) -> dict:
    program = lp.Program(f'split_{nodes}')
    with program.group('counter'):
        handles = [program.add_node(lp.CourierNode(NotingCounter)) for _ in range(nodes)]
    load_at_start = os.getloadavg()
    vmstat = _vmstat()
    start = time.time()
    controller = lp.launch(program, launch_type='local_mp')
    ready_at = time.time()
    try:
        pids = [s.pid for s in controller.statuses()]
        at_ready = [_schedstat_s(pid) for pid in pids]
        stats = [_proc_stat(pid) for pid in pids]
        ticks = [stat[0] for stat in stats]
        read_s = time.time() - ready_at
        available = psutil.virtual_memory().available / 2**30
        vmstat = {name: value - vmstat[name] for name, value in _vmstat().items()}
        noted = {s.pid: None for s in controller.statuses()}
        futures = [(s.pid, h.dereference().futures.noted())
                   for s, h in zip(controller.statuses(), handles)]
        noted = {pid: future.result(timeout=300) for pid, future in futures}
    finally:
        controller.stop()
        controller.wait(timeout=300)
    start_cpu, wait_cpu, wait_s, built = [], [], [], []
    for pid, cpu in zip(pids, at_ready):
        built_cpu, built_at = noted[pid]
        start_cpu.append(built_cpu)
        wait_cpu.append(cpu - built_cpu)
        wait_s.append(ready_at - built_at)
        built.append(built_at)
    ready = ready_at - start
    return {'nodes': nodes, 'ready_s': round(ready, 2),
            'ready_ms_per_node': round(1000 * ready / nodes, 2),
            'nodes_cpu_ms_per_node': round(1000 * sum(at_ready) / nodes, 3),
            'proc_stat_ms_per_node': round(1000 * sum(ticks) / nodes, 3),
            'start_cpu_ms': _summary(start_cpu), 'waiting_cpu_ms': _summary(wait_cpu),
            'waiting_s': _summary(wait_s, 1.0),
            'idle_cpu_ms_per_s_waited': round(1000 * sum(wait_cpu) / sum(wait_s), 3),
            'start_cpu_ms_by_decile': _deciles(built, start_cpu),
            'waiting_cpu_ms_by_decile': _deciles(built, wait_cpu),
            'minor_faults_per_node': round(statistics.fmean(s[1] for s in stats)),
            'major_faults_per_node': round(statistics.fmean(s[2] for s in stats), 2),
            'memory_available_gib_at_ready': round(available, 2),
            'user_ms_by_decile': _deciles(built, [st[3] for st in stats]),
            'system_ms_by_decile': _deciles(built, [st[4] for st in stats]),
            'reclaim_during_launch': vmstat,
            'read_s': round(read_s, 2),
            'load_average': {'start': load_at_start, 'end': os.getloadavg()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--nodes', default='300,1000')
    parser.add_argument('--json')
    args = parser.parse_args()
    result = {'command': sys.argv[1:], 'points': []}
    for nodes in [int(n) for n in args.nodes.split(',')]:
        result['points'].append(measure(nodes))
        print(json.dumps(result['points'][-1]), flush=True)
        if args.json:  # After every point: a run cut short keeps what it measured.
            pathlib.Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == '__main__':
    main()
