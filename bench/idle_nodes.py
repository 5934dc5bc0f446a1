"""Threads and idle wake-ups of N launched courier nodes: what an idle node costs the others.

    python -m bench.idle_nodes --nodes 300,1000 --launch_types local_mp,local_mt \
        --json bench/idle_nodes.json

For each point: launch N ``Counter`` nodes (no calls), time ``lp.launch`` (ready), wait
3 s, then count the threads of each node process (local_mp; the launching process for
local_mt), and over 5 s the context switches of all their threads (wake-ups) and their
CPU time. A node that nobody calls should cost neither (issue 25: at 1,000 local_mp
nodes, gRPC's serving threads kept ≈0.75 of a core busy while the rest still started).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import psutil

import launchpad_py as lp
from bench.scale_nodes import Counter


def _switches(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        for tid in os.listdir(f'/proc/{pid}/task'):
            try:
                with open(f'/proc/{pid}/task/{tid}/status') as f:
                    total += sum(int(line.split()[1]) for line in f if 'ctxt_switches' in line)
            except FileNotFoundError:
                pass
    return total


def _cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            total += sum(psutil.Process(pid).cpu_times()[:2])
        except psutil.NoSuchProcess:
            pass
    return total


def measure(nodes: int, launch_type: str) -> dict:
    program = lp.Program('idle')
    with program.group('counter'):
        for _ in range(nodes):
            program.add_node(lp.CourierNode(Counter))
    load_at_start = os.getloadavg()[0]
    start = time.perf_counter()
    controller = lp.launch(program, launch_type=launch_type)
    ready = time.perf_counter() - start
    try:
        time.sleep(3)  # Let the nodes settle: what follows is their idle cost.
        if launch_type == 'local_mp':
            # Node processes: the fork server's children (it has them; they have none). By
            # thread count until stop 45, which a node without gRPC's threads no longer meets.
            processes = [p for p in psutil.Process().children(recursive=True)
                         if not p.children()]
            if len(processes) != nodes:
                raise RuntimeError(f'found {len(processes)} node processes, not {nodes}')
        else:
            processes = [psutil.Process()]
        pids = [p.pid for p in processes]
        threads = sum(p.num_threads() for p in processes)
        switches, cpu = _switches(pids), _cpu(pids)
        time.sleep(5)
        switches, cpu = (_switches(pids) - switches) / 5, (_cpu(pids) - cpu) / 5
    finally:
        controller.stop()
        controller.wait(timeout=120)
    return {'launch_type': launch_type, 'nodes': nodes, 'ready_s': ready,
            'threads_per_node': threads / nodes, 'wakeups_per_node_per_s': switches / nodes,
            'idle_cpu_cores': cpu, 'load_average': [load_at_start, os.getloadavg()[0]]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--nodes', default='300,1000')
    parser.add_argument('--launch_types', default='local_mp,local_mt')
    parser.add_argument('--json')
    args = parser.parse_args()
    points = []
    for nodes in [int(n) for n in args.nodes.split(',')]:
        for launch_type in args.launch_types.split(','):
            points.append(measure(nodes, launch_type))
            print(json.dumps(points[-1]), flush=True)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'points': points}, f, indent=2)


if __name__ == '__main__':
    main()
