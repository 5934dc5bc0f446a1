"""SIGKILL the launcher of an N-node ssh program: how long until nothing of it runs on any host.

    python -m bench.scale_kill --nodes 10,100,300,1000 --json bench/scale_ssh_kill.json

A launching process of its own starts N counters over h1..h3 (as ``bench.scale``
places them) and says when they are ready; then it is killed with SIGKILL, and
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


def hold(nodes: int, mark: str) -> None:
    """The launching process: N counters on the ssh hosts; prints 'ready', then waits."""
    program = lp.Program(f'kill_{nodes}')
    with program.group('counter'):
        for _ in range(nodes):
            program.add_node(lp.CourierNode(scale_nodes.Counter))
    controller = lp.launch(program, launch_type='ssh',
                           **launch_arguments('ssh', program, mark))
    sessions = sum(1 for p in psutil.Process().children() if p.name() == 'ssh')
    print(json.dumps({'ready': True, 'ssh_sessions': sessions}), flush=True)
    controller.wait()


def kill_once(nodes: int) -> dict:
    mark = uuid.uuid4().hex
    launcher = subprocess.Popen([sys.executable, '-m', 'bench.scale_kill', '--hold', str(nodes),
                                 '--mark', mark], stdout=subprocess.PIPE, text=True)
    started = time.perf_counter()
    report = json.loads(launcher.stdout.readline() or '{}')
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
    return {'nodes': nodes, 'launcher_ready_s': ready, 'ssh_sessions': report['ssh_sessions'],
            'processes_before_kill': running, 'left_after_60_s': len(left),
            'all_gone_s': None if left else time.perf_counter() - killed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--nodes', default='10,100,300,1000')
    parser.add_argument('--hold', type=int, help=argparse.SUPPRESS)
    parser.add_argument('--mark', help=argparse.SUPPRESS)
    parser.add_argument('--json')
    args = parser.parse_args()
    if args.hold:
        hold(args.hold, args.mark)
        return
    runs = []
    for nodes in [int(n) for n in args.nodes.split(',')]:
        runs.append(kill_once(nodes))
        print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'machine': {'cpus': os.cpu_count(), 'load_at_start': os.getloadavg()},
                       'runs': runs}, f, indent=2)


if __name__ == '__main__':
    main()
