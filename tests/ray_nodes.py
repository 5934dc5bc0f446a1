"""Nodes and a launching script for the Ray launcher's tests; importable from node processes.

As a script (``python tests/ray_nodes.py ADDRESS TOKEN``) it launches three servers spread
over the test Ray cluster, each actor and node process marked with ``LP_TEST_TOKEN=TOKEN``,
prints one JSON line (the hosts, and the program's actor-name prefix), and waits.
"""

from __future__ import annotations

import json
import os
import sys

import launchpad_py as lp


class Where:
    """Says where it runs and what GPUs it sees."""

    def where(self):
        return {'host': os.environ.get('LAUNCHPAD_PY_RAY_HOST'), 'pid': os.getpid(),
                'actor_pid': os.getppid(),
                'gpus': os.environ.get('CUDA_VISIBLE_DEVICES'),
                'preallocate': os.environ.get('XLA_PYTHON_CLIENT_PREALLOCATE')}


class Caller:
    """Calls another node: proof that courier carries calls between Ray-placed nodes."""

    def __init__(self, other):
        self._other = other

    def ask(self):
        return self._other.where()


def _main(address: str, token: str) -> None:
    program = lp.Program(f'raykill{token[-6:]}')
    for host in ('h1', 'h2', 'h3'):
        program.add_node(lp.CourierNode(Where), label=host)
    marked = {'LP_TEST_TOKEN': token}
    resources = {host: lp.RayResources(resources={host: 1}, env=marked,
                                       runtime_env={'env_vars': marked})
                 for host in ('h1', 'h2', 'h3')}
    controller = lp.launch(program, launch_type='ray', resources=resources,
                           ray_options={'address': address})
    print(json.dumps(sorted(s.host for s in controller.statuses())), flush=True)
    controller.wait()


if __name__ == '__main__':
    _main(*sys.argv[1:])
