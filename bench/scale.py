"""Programs of 10 to 2,000 nodes on local_mp, local_mt, ssh, slurm: ready time, memory, call rates.

    python -m bench.scale --json bench/scale.json                  # 10, 100, 300, 1000
    python -m bench.scale --nodes 1000 --reps 20 --json bench/scale_1000x20.json
    python -m bench.scale --launch_types ssh --json bench/scale_ssh.json   # over h1..h3

ssh spreads the counters round-robin over ``LP_BENCH_SSH_HOSTS`` (default
h1,h2,h3, the test hosts of ../shared/infra/ssh_hosts.sh, reached with their
``/tmp/lp-ssh/ssh_config``); the caller runs on the first. slurm runs every
node in one job on the test cluster (scripts/slurm_cluster.sh) over its three
hosts, with ``--overcommit`` (the cluster declares 48 CPUs; nodes share them).

For each launch type and node count, ``--reps`` launches of issue 25's program
(N ``CourierNode(Counter)`` in one group, one ``PyNode`` that makes one
``futures.add(1)`` call to each, then ``lp.stop()``), measuring:

- ready: how long ``lp.launch`` took to return (every server listening);
- fan-out calls/s: the caller's N calls, issued at once, over the time until
  all answered;
- stop: from the caller's ``lp.stop()`` until ``wait()`` returned;
- peak USS: the largest sum of unique memory over the launching process and
  every process below it (for local_mt that is the launching process alone), from
  bench/uss_sampler.py: a process of its own that takes only idle CPU until ready, makes
  one pass at ready and samples on at normal priority until the program ended; the run
  records the peak before ready, at ready and after, and the sampler's passes and CPU
  seconds (``sampler_cpu_s``: what the measurement cost, outside every other figure).

Then once per point, fan-in: one counter and N client nodes making
``--fan_in_calls`` sync calls each; calls/s is the server's, between its
first and its last call. Each point records the machine's load average
(``os.getloadavg()``) when it started and when it ended, the ready time per
node in milliseconds, and the CPU per node from launch to ready (``bench/tree_cpu.py``:
user+sys of the launching process and of every process below it but the
memory sampler; far less moved by the machine's load than wall time), split into the launching
process's (``launcher_cpu``) and the processes below it (``nodes_cpu``); each run also keeps
the launching process's garbage collections and their time, and its threads at ready.

One invocation can measure every launcher (the slurm points read
``SLURM_CONF``, /tmp/lp-slurm/slurm.conf when unset):

    python -m bench.scale --launch_types local_mp,local_mt,ssh,slurm \
        --nodes 10,100,300,1000,2000 --reps 20 --reps_remote 2 --max_remote_nodes 1000 \
        --json bench/scale_all.json

``--reps_remote`` is the launches per point on ssh and slurm (default ``--reps``),
``--reps_over 1000:3`` those of local points above 1,000 nodes;
``--max_remote_nodes`` skips their points above that many nodes.

``--fresh_process`` runs each launch from a launching process of its own, as
separate runs of a script would (a long-lived launching process keeps every
client it made, with its connection and reader thread, cached by address).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import psutil

import launchpad_py as lp
from launchpad_py.launchers.options import LaunchOptions
from bench import page_touch, scale_nodes, tree_cpu
from bench.uss_sampler import MARK, UssSampler


def launch_arguments(launch_type: str, program: lp.Program, mark: str = '') -> dict:
    """What ``lp.launch`` needs besides the program: the hosts for ssh, the job for slurm
    (their processes get ``MARK=mark`` in their environment)."""
    if launch_type == 'slurm':  # 48 CPUs on the test cluster: tasks share them (overcommit).
        return {'resources': {label: lp.SlurmResources(env={MARK: mark})
                              for label in program.groups},
                'slurm_options': {'extra_args': ['--overcommit', '--nodes=3'], 'steps': 'host',
                                  'output_dir': os.path.join(tempfile.gettempdir(),
                                                             'lp-bench-slurm')}}
    if launch_type != 'ssh':
        return {}
    options = ['-F', os.path.join(os.environ.get('LP_SSH_DIR', '/tmp/lp-ssh'), 'ssh_config')]
    hosts = [lp.SshHost(name, ssh_options=options, env={MARK: mark})
             for name in os.environ.get('LP_BENCH_SSH_HOSTS', 'h1,h2,h3').split(',')]
    return {'resources': {label: hosts if label != 'caller' and label != 'server' else hosts[0]
                          for label in program.groups}}


def fan_out_once(launch_type: str, nodes: int, scratch: str) -> dict:
    result_path = os.path.join(scratch, f'fan_out_{launch_type}_{nodes}.json')
    mark = uuid.uuid4().hex
    sampler = UssSampler(os.getpid(), mark)
    gc_time = tree_cpu.GcTime()
    cpu = tree_cpu.TreeCpu(exclude_pids={sampler.pid})
    start = time.perf_counter()
    try:
        program = scale_nodes.fan_out(nodes, result_path)
        controller = lp.launch(program, launch_type=launch_type,
                               **launch_arguments(launch_type, program, mark))
        ready = time.perf_counter() - start
        collections = gc_time.close()  # First: reading /proc makes objects, and collections.
        spent = {**cpu.read(), **collections, 'launcher_threads': threading.active_count()}
        sampler.ready()
        controller.wait(timeout=900)
        ended_at = time.time()
    finally:
        gc_time.close()
        memory = sampler.stop()
    with open(result_path) as result:
        caller = json.load(result)
    os.remove(result_path)
    return {'ready_s': ready, 'answered': caller['answered'],
            'fan_out_calls_per_s': caller['calls_per_s'],
            'stop_s': ended_at - caller['stop_requested_at'], **spent,
            **{key.replace('uss', 'uss_gib'): value / 2**30
               for key, value in memory.items() if 'uss' in key},
            'sampler_processes_seen': memory['processes_seen'],
            'sampler_passes': memory['passes'],
            'sampler_longest_pass_s': memory['longest_pass_s'],
            'sampler_cpu_s': memory['cpu_s']}


def fan_in_once(launch_type: str, nodes: int, calls: int) -> dict:
    program, server = scale_nodes.fan_in(nodes, calls)
    start = time.perf_counter()
    with lp.launch(program, launch_type=launch_type,
                   **launch_arguments(launch_type, program, uuid.uuid4().hex)) as controller:
        ready = time.perf_counter() - start
        count, rate = server.dereference().wait_count(nodes * calls, 600)
        del controller
    return {'ready_s': ready, 'calls': count, 'expected_calls': nodes * calls,
            'fan_in_calls_per_s': rate}


def fan_out_in_new_process(launch_type: str, nodes: int, scratch: str) -> dict:
    """``fan_out_once`` in a launching process of its own."""
    out = os.path.join(scratch, 'one.json')
    done = subprocess.run([sys.executable, '-m', 'bench.scale', '--nodes', str(nodes),
                           '--launch_types', launch_type, '--no_fan_in', '--json', out],
                          capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    with open(out) as f:
        [run] = json.load(f)['points'][0]['runs']
    run.pop('nodes')
    if 'error' in run:
        raise RuntimeError(run['error'])
    return run


def summarize(runs: list[dict]) -> dict:
    ok = [r for r in runs if 'error' not in r]
    row = {'launches': len(runs), 'succeeded': sum(1 for r in ok if r['answered'] == r['nodes'])}
    for key in ('ready_s', 'stop_s', 'peak_uss_gib', 'fan_out_calls_per_s'):
        values = [r[key] for r in ok]
        if values:
            row[f'{key}_median'] = statistics.median(values)
            row[f'{key}_max'] = max(values)
    if 'ready_s_median' in row:
        row['ready_ms_per_node_median'] = 1000 * row['ready_s_median'] / runs[0]['nodes']
    values = [r['sampler_cpu_s'] for r in ok if 'sampler_cpu_s' in r]
    if values:
        row['sampler_cpu_s_median'] = statistics.median(values)
    for key in ('cpu_s', 'launcher_cpu_s', 'nodes_cpu_s'):  # CPU from launch to ready.
        values = [r[key] for r in ok if key in r]
        if values:
            name = key[:-len('_s')]
            row[f'{name}_ms_per_node_median'] = 1000 * statistics.median(values) / runs[0]['nodes']
    row['errors'] = [r['error'] for r in runs if 'error' in r]
    return row


REMOTE = ('ssh', 'slurm')
#: ``--warm_memory``: MiB a local node writes by ready, at most (6-7.5 measured in stop 44),
#: and the GiB of available memory left unwarmed.
WARM_MIB_PER_NODE, WARM_SPARE_GIB = 8, 1.0


def load_average() -> list[float]:
    """The machine's 1, 5 and 15 minute load averages, rounded."""
    return [round(load, 2) for load in os.getloadavg()]


def measure_point(launch_type: str, nodes: int, reps: int, args, scratch: str) -> dict:
    """``reps`` launches of the fan-out program, then one fan-in launch, with the load
    average before and after."""
    load_at_start = load_average()
    # Free memory and page cache: on this VM a page long free costs several times one
    # reclaimed from the cache (docs/performance.md, stop 44), so a reader needs both.
    memory_at_start = page_touch.memory_gib()
    warmed = None
    if args.warm_memory and launch_type not in REMOTE:
        # What the launch will write (~8 MiB a node at most), within what is there to take.
        available = psutil.virtual_memory().available / 2**30 - WARM_SPARE_GIB
        warmed = page_touch.warm(max(0.0, min(nodes * WARM_MIB_PER_NODE / 1024, available)))
    runs = []
    once = fan_out_in_new_process if args.fresh_process else fan_out_once
    for _ in range(reps):
        try:
            runs.append({'nodes': nodes, **once(launch_type, nodes, scratch)})
        except Exception as exc:  # Counted as a failed launch, and reported.
            runs.append({'nodes': nodes, 'error': f'{type(exc).__name__}: {exc}'[-3000:]})
    point = {'launch_type': launch_type, 'nodes': nodes, **summarize(runs), 'runs': runs}
    if not args.no_fan_in and nodes <= args.fan_in_max_nodes:
        try:
            point['fan_in'] = fan_in_once(launch_type, nodes, args.fan_in_calls)
        except Exception as exc:
            point['fan_in'] = {'error': f'{type(exc).__name__}: {exc}'[:500]}
    point['load_average'] = {'start': load_at_start, 'end': load_average()}
    point['memory_at_start'] = memory_at_start
    if warmed is not None:
        point['memory_warmed'] = warmed
    return point


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--nodes', default='10,100,300,1000')
    parser.add_argument('--launch_types', default='local_mp,local_mt')
    parser.add_argument('--reps', type=int, default=1)
    parser.add_argument('--fan_in_calls', type=int, default=20)
    parser.add_argument('--no_fan_in', action='store_true')
    parser.add_argument('--fan_in_max_nodes', type=int, default=1000,
                        help='no fan-in point above this many nodes (2,000 client processes '
                             'need more memory than a shared 23 GiB machine has)')
    parser.add_argument('--fresh_process', action='store_true',
                        help='each launch from a new launching process')
    parser.add_argument('--reps_remote', type=int, default=None,
                        help='launches per ssh and slurm point (default: --reps)')
    parser.add_argument('--max_remote_nodes', type=int, default=None,
                        help='no ssh or slurm point above this many nodes')
    parser.add_argument('--reps_over', default=None, metavar='NODES:REPS',
                        help='launches per local point above NODES nodes (e.g. 1000:3: the '
                        'issue asks 20 at 1,000 nodes and one at 2,000)')
    parser.add_argument('--warm_memory', action='store_true',
                        help='before each local point, write and free the memory its launch '
                        'will need, so that every size meets memory in the same state (see '
                        'page_touch.warm); recorded as memory_warmed')
    parser.add_argument('--json', help='also write the results to this file (after every point)')
    args = parser.parse_args()
    over_nodes, over_reps = (int(n) for n in args.reps_over.split(':')) if args.reps_over \
        else (None, None)
    os.environ.setdefault('SLURM_CONF', '/tmp/lp-slurm/slurm.conf')
    points = []
    with tempfile.TemporaryDirectory() as scratch:
        for nodes in [int(n) for n in args.nodes.split(',')]:
            for launch_type in args.launch_types.split(','):
                reps = args.reps
                if over_nodes is not None and nodes > over_nodes:
                    reps = over_reps
                if launch_type in REMOTE:
                    if args.max_remote_nodes is not None and nodes > args.max_remote_nodes:
                        continue
                    reps = args.reps if args.reps_remote is None else args.reps_remote
                point = measure_point(launch_type, nodes, reps, args, scratch)
                points.append(point)
                print(json.dumps({k: v for k, v in point.items() if k != 'runs'}),
                      file=sys.stderr, flush=True)
                if args.json:  # After every point: a run cut short keeps what it measured.
                    _write(args.json, args, points)


def _write(path: str, args, points: list[dict]) -> None:
    with open(path, 'w') as f:
        json.dump({'machine': {'cpus': os.cpu_count(), 'python': platform.python_version(),
                               'memory_gib': psutil.virtual_memory().total / 2**30},
                   'grace_s': LaunchOptions().grace,
                   'fresh_process': args.fresh_process,
                   'command': sys.argv[1:],
                   'points': points}, f, indent=2)


if __name__ == '__main__':
    main()
