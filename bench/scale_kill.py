"""SIGKILL the launcher of an N-node program on ssh or slurm: how long until nothing of it runs.

    python -m bench.scale_kill --nodes 10,100,300,1000 --json bench/scale_ssh_kill.json
    python -m bench.scale_kill --launch_type slurm --nodes 1000 --json bench/scale_slurm_kill.json

A launching process of its own starts N counters over h1..h3 (as ``bench.scale``
places them, or in one Slurm job) and says when they are ready; then it is killed with SIGKILL, and
every process of the run (found by the mark in its environment: the hosts
share this machine's process table) is watched until none is left.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import uuid

import psutil

import launchpad_py as lp
from bench import scale_nodes
from bench.scale import launch_arguments, marked


def hold(launch_type: str, nodes: int, mark: str) -> None:
    """The launching process: N counters on the hosts; prints 'ready', then waits."""
    program = lp.Program(f'kill_{nodes}')
    with program.group('counter'):
        for _ in range(nodes):
            program.add_node(lp.CourierNode(scale_nodes.Counter))
    controller = lp.launch(program, launch_type=launch_type,
                           **launch_arguments(launch_type, program, mark))
    sessions = sum(1 for p in psutil.Process().children() if p.name() in ('ssh', 'srun'))
    print(json.dumps({'ready': True, 'sessions': sessions}), flush=True)
    controller.wait()


def kill_once(launch_type: str, nodes: int) -> dict:
    mark = uuid.uuid4().hex
    launcher = subprocess.Popen([sys.executable, '-m', 'bench.scale_kill', '--hold', str(nodes),
                                 '--mark', mark, '--launch_type', launch_type],
                                stdout=subprocess.PIPE, text=True)
    started = time.perf_counter()
    report = {}
    for line in launcher.stdout:  # The launcher's own lines ('launchpad_py: ...') come first.
        if line.startswith('{'):
            report = json.loads(line)
            break
    if not report.get('ready'):
        launcher.kill()
        raise RuntimeError(f'the launcher of {nodes} nodes ended before they were ready')
    ready = time.perf_counter() - started
    running = len(marked(mark))
    launcher.send_signal(signal.SIGKILL)
    killed = time.perf_counter()
    launcher.wait()
    left = marked(mark)
    while left and time.perf_counter() - killed < 60:
        time.sleep(0.2)  # A benchmark's poll, not a test's synchronization.
        left = marked(mark)
    return {'launch_type': launch_type, 'nodes': nodes, 'launcher_ready_s': ready,
            'sessions': report['sessions'],
            'processes_before_kill': running, 'left_after_60_s': len(left),
            'all_gone_s': None if left else time.perf_counter() - killed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--nodes', default='10,100,300,1000')
    parser.add_argument('--launch_type', default='ssh', choices=['ssh', 'slurm'])
    parser.add_argument('--hold', type=int, help=argparse.SUPPRESS)
    parser.add_argument('--mark', help=argparse.SUPPRESS)
    parser.add_argument('--json')
    args = parser.parse_args()
    if args.hold:
        hold(args.launch_type, args.hold, args.mark)
        return
    runs = []
    for nodes in [int(n) for n in args.nodes.split(',')]:
        runs.append(kill_once(args.launch_type, nodes))
        print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'machine': {'cpus': os.cpu_count(), 'load_at_start': os.getloadavg()},
                       'runs': runs}, f, indent=2)


if __name__ == '__main__':
    main()
