"""Nodes and a launching script for the SSH and Slurm launcher tests; importable on every host."""

from __future__ import annotations

import json
import os
import sys

import numpy as np

import launchpad_py as lp

BIG = 16 * 1024 * 1024  # float32 elements: 64 MiB.


class Store:
    """A server that echoes and sums arrays."""

    def echo(self, value):
        return value

    def total(self, array):
        return float(np.sum(array, dtype=np.float64))

    def where(self):
        return os.environ.get('LP_TEST_HOST') or os.environ.get('SLURMD_NODENAME')


def use_store(store, result_path=None):
    """Calls, futures and 64 MiB arrays both ways; prints what it saw (a ``RESULT`` line, which
    comes back without a shared path) and writes it to ``result_path`` if given."""
    array = np.arange(BIG, dtype=np.float32)
    back = store.echo(array)
    futures = [store.futures.echo(i) for i in range(50)]
    result = {
        'server_host': store.where(),
        'echo': store.echo('hello'),
        'futures': [f.result(timeout=60) for f in futures],
        'big_bytes': int(back.nbytes),
        'big_equal': bool(np.array_equal(back, array)),
        'big_total': store.total(array),
        'client_host': os.environ.get('LP_TEST_HOST') or os.environ.get('SLURMD_NODENAME'),
    }
    print('RESULT ' + json.dumps(result), flush=True)
    if result_path:
        with open(result_path, 'w') as f:
            json.dump(result, f)


def store_program(result_dir: str | None = None):
    """A store and two clients that each print what they saw, and write it to
    ``result_dir/client<i>.json`` if ``result_dir`` is given."""
    program = lp.Program('across')
    store = program.add_node(lp.CourierNode(Store), label='store')
    with program.group('client'):
        for index in range(2):
            program.add_node(lp.PyNode(use_store, store, result_dir and os.path.join(
                result_dir, f'client{index}.json')))
    return program, store


def print_gpus():
    print('CUDA_VISIBLE_DEVICES=' + os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>'), flush=True)
    lp.wait_for_stop()


def wait_forever():
    lp.wait_for_stop()


def ignore_stop_with_a_child():
    """Starts a child process of its own, then never looks at the stop request."""
    import subprocess
    import threading
    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])
    threading.Event().wait()


def spread_program(token: str):
    """Nodes on h1..h3, one of them a colocation of processes; all marked with ``token``."""
    from nodes_for_tests import Pinger
    program = lp.Program('spread')
    program.add_node(lp.CourierNode(Pinger), label='pinger')
    program.add_node(lp.PyNode(wait_forever), label='waiter')
    program.add_node(lp.MultiProcessingColocation(
        [lp.PyNode(wait_forever), lp.PyNode(wait_forever)]), label='colocated')
    options = ['-F', os.path.join(os.environ.get('LP_SSH_DIR', '/tmp/lp-ssh'), 'ssh_config')]
    names, more = ['h1', 'h2', 'h3'], {}
    if os.environ.get('LP_SSH_TEST_HOSTS') == 'p':  # The share-nothing hosts, code shipped.
        options = ['-F', os.path.join(os.environ.get('LP_PRIVATE_DIR', '/tmp/lp-private'),
                                      'ssh_config')]
        names, more = ['p1', 'p2', 'p3'], {'python': '/opt/lp/env/bin/python', 'ship_code': True}
    resources = {group: lp.SshHost(host, ssh_options=options, env={'LP_TEST_TOKEN': token},
                                   **more)
                 for group, host in zip(program.groups, names)}
    return program, resources


def _made_host_agents() -> list:
    """The host agents this process makes from now on, as they are made."""
    from launchpad_py.launchers.remote import host_agents
    made, make = [], host_agents.HostAgent.__init__

    def init(agent, *args, **kwargs):
        make(agent, *args, **kwargs)
        made.append(agent)

    host_agents.HostAgent.__init__ = init
    return made


if __name__ == '__main__':  # A launcher to SIGKILL: prints its nodes' hosts and pids, then waits.
    agents = _made_host_agents()
    program, resources = spread_program(sys.argv[1])
    controller = lp.launch(program, launch_type='ssh', resources=resources)
    if os.environ.get('LP_TEST_AGENT_TIMEOUT_S'):
        # A test that waits the agents' timeout out asks for less, once the launch is done:
        # launching on a loaded machine can leave an agent unpinged for seconds, and a short
        # timeout from the start then ended nodes early.
        for agent in agents:
            agent._send({'timeout': float(os.environ['LP_TEST_AGENT_TIMEOUT_S'])})
    print(json.dumps([[s.host, s.pid] for s in controller.statuses()]), flush=True)
    controller.wait()
