"""Launch-to-ready time of a 30-node program under slurm, ssh, ray and local_mp, in one run.

Launch-to-ready is the time ``lp.launch`` takes to return: the job granted
(slurm), every node process started and dialled back, the address table sent,
every courier server listening. Every node is a courier server, so all 30 must
bind. Needs the Slurm test cluster (``bash scripts/slurm_cluster.sh up``), the
Ray test cluster (``bash scripts/ray_cluster.sh up``) and the ssh hosts
(``../shared/infra/ssh_hosts.sh up``), all as root::

    python -m bench.launch_ready --json bench/launch_ready.json
    python -m bench.launch_ready --nodes 300 --launch_types ray,ssh,local_mp --json bench/launch_ready_300.json

Under ray each node asks for a tenth of a CPU, so 300 fit the test cluster's 48; with
``--ray_nodes_per_actor 10`` ten nodes share one actor (a Ray worker process costs far more
memory than a node: 300 nodes in 300 actors do not fit this machine's memory).

Each launch type is launched ``--reps`` times, interleaved; the median, the
fastest and the slowest are reported, with the time to stop the program.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import launchpad_py as lp

LAUNCH_TYPES = ('slurm', 'ssh', 'ray', 'local_mp')
SSH_CONFIG = os.path.join(os.environ.get('LP_SSH_DIR', '/tmp/lp-ssh'), 'ssh_config')
RAY_ADDRESS_FILE = os.path.join(os.environ.get('LP_RAY_DIR', '/tmp/lp-ray'), 'address')


class Counter:
    """The smallest useful server: one per node."""

    def __init__(self):
        self.count = 0

    def add(self, n):
        self.count += n
        return self.count


def program_of(nodes: int) -> lp.Program:
    program = lp.Program('ready30')
    with program.group('server'):
        for _ in range(nodes):
            program.add_node(lp.CourierNode(Counter))
    return program


def launch_kwargs(launch_type: str, logs: str, nodes_per_actor: int = 1) -> dict:
    if launch_type == 'slurm':
        return {'slurm_options': {'output_dir': logs}}
    if launch_type == 'ssh':
        hosts = [lp.SshHost(name, ssh_options=['-F', SSH_CONFIG]) for name in ('h1', 'h2', 'h3')]
        return {'resources': {'server': hosts}}
    if launch_type == 'ray':
        with open(RAY_ADDRESS_FILE) as address:
            spec = lp.RayResources(num_cpus=0.1, scheduling='SPREAD',
                                   nodes_per_actor=nodes_per_actor)
            return {'resources': {'server': spec},
                    'ray_options': {'address': address.read().strip()}}
    return {}


def measure(launch_type: str, nodes: int, logs: str, nodes_per_actor: int = 1
            ) -> tuple[float, float]:
    """(seconds to ready, seconds to stop) of one launch."""
    program = program_of(nodes)
    start = time.perf_counter()
    controller = lp.launch(program, launch_type=launch_type,
                           **launch_kwargs(launch_type, logs, nodes_per_actor))
    ready = time.perf_counter() - start
    assert all(s.state == lp.NodeState.RUNNING for s in controller.statuses())
    start = time.perf_counter()
    controller.stop()
    controller.wait()
    return ready, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--nodes', type=int, default=30)
    parser.add_argument('--reps', type=int, default=5)
    parser.add_argument('--launch_types', default=','.join(LAUNCH_TYPES))
    parser.add_argument('--ray_nodes_per_actor', type=int, default=1,
                        help='RayResources(nodes_per_actor=...) of the ray launches')
    parser.add_argument('--json', help='also write the results to this file')
    args = parser.parse_args()
    os.environ.setdefault('SLURM_CONF', '/tmp/lp-slurm/slurm.conf')
    launch_types = args.launch_types.split(',')
    load_before = os.getloadavg()[0]
    times: dict[str, list[tuple[float, float]]] = {t: [] for t in launch_types}
    failed: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as logs:
        for _ in range(args.reps):
            for launch_type in launch_types:
                try:
                    times[launch_type].append(
                        measure(launch_type, args.nodes, logs, args.ray_nodes_per_actor))
                except lp.LaunchError as exc:  # Counted and shown; the others go on.
                    failed[launch_type] = failed.get(launch_type, 0) + 1
                    print(f'{launch_type}: launch failed: {str(exc).splitlines()[0]}',
                          file=sys.stderr)
    rows = {}
    print(f'{args.nodes}-node program, {args.reps} launches each (seconds)', file=sys.stderr)
    print(f'{"launch type":<12}{"ready median":>14}{"min":>8}{"max":>8}{"stop median":>13}',
          file=sys.stderr)
    for launch_type, pairs in times.items():
        if not pairs:
            continue
        ready = [r for r, _ in pairs]
        stop = [s for _, s in pairs]
        rows[launch_type] = {'ready_median_s': statistics.median(ready), 'ready_min_s': min(ready),
                             'ready_max_s': max(ready), 'stop_median_s': statistics.median(stop),
                             'failed_launches': failed.get(launch_type, 0)}
        row = rows[launch_type]
        print(f'{launch_type:<12}{row["ready_median_s"]:>14.2f}{row["ready_min_s"]:>8.2f}'
              f'{row["ready_max_s"]:>8.2f}{row["stop_median_s"]:>13.2f}', file=sys.stderr)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'nodes': args.nodes, 'reps': args.reps,
                       'ray_nodes_per_actor': args.ray_nodes_per_actor,
                       'load_average_1min': [load_before, os.getloadavg()[0]],
                       'cpus': os.cpu_count(), 'results': rows}, f, indent=2)


if __name__ == '__main__':
    main()
