"""Launching scripts for the Slurm launcher tests, run as their own processes.

    python tests/slurm_nodes.py spread TOKEN        # prints the job id and node pids, then waits
    python tests/slurm_nodes.py pending TOKEN       # asks for the DOWN partition and waits
    python tests/slurm_nodes.py in_allocation PATH  # inside sbatch: two launches, results to PATH
"""

from __future__ import annotations

import json
import os
import sys

import launchpad_py as lp
from ssh_nodes import spread_program, wait_forever

LOGS = os.path.join(os.environ.get('TMPDIR', '/tmp'), 'lp-slurm-test-logs')


def _spread(token: str) -> None:
    """Nodes on the cluster, marked with ``token``; one of them a colocation of processes."""
    program, _ = spread_program(token)
    resources = {group: lp.SlurmResources(env={'LP_TEST_TOKEN': token})
                 for group in program.groups}
    controller = lp.launch(program, launch_type='slurm', resources=resources,
                           slurm_options={'output_dir': LOGS})
    print(json.dumps([[s.host, s.pid] for s in controller.statuses()]), flush=True)
    controller.wait()


def _pending(token: str) -> None:
    program = lp.Program(f'pending-{token}')
    program.add_node(lp.PyNode(wait_forever), label='waiter')
    lp.launch(program, launch_type='slurm', resources={'waiter': lp.SlurmResources(
        partition='lpdown')}, slurm_options={'output_dir': LOGS}).wait()


def _in_allocation(path: str) -> None:
    """Launches a program into the allocation this sbatch script holds, then one too big for it."""
    program = lp.Program('inside')
    seen = [program.add_node(lp.CourierNode(_Reporter), label=f'reporter{i}') for i in range(2)]
    result = {'launcher_job': os.environ['SLURM_JOB_ID']}
    with lp.launch(program, launch_type='slurm', slurm_options={'output_dir': LOGS}) as controller:
        result['nodes'] = [handle.dereference().where() for handle in seen]
        result['hosts'] = sorted(s.host for s in controller.statuses())
    too_big = lp.Program('too_big')
    for i in range(3):
        too_big.add_node(lp.PyNode(wait_forever), label=f'waiter{i}')
    try:
        lp.launch(too_big, launch_type='slurm', slurm_options={'output_dir': LOGS})
    except lp.ResourcesError as exc:
        result['too_big'] = str(exc)
    with open(path, 'w') as f:
        json.dump(result, f)


class _Reporter:
    """Says which job, host and job step it runs in."""

    def where(self):
        return [os.environ.get('SLURM_JOB_ID'), os.environ.get('SLURMD_NODENAME'),
                os.environ.get('SLURM_STEP_ID')]


if __name__ == '__main__':
    {'spread': _spread, 'pending': _pending, 'in_allocation': _in_allocation}[sys.argv[1]](
        sys.argv[2])
