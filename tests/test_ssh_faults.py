"""Fault run of the SSH launcher: launches across h1..h3, each hit by a SIGKILL at a random moment.

Opt-in: ``LP_SSH_FAULT_RUNS=20 .venv/bin/python -m pytest tests/test_ssh_faults.py -s``.
Each launch loses either its launcher or one random node process (a node or a
colocated child) at a random moment, starting-up included. Counted: hangs
(a launcher still alive 60 s after losing a node) and processes of the launch
left on any host 15 s after the kill.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
import uuid

import psutil
import pytest

from conftest import REPO, marked_processes, needs_ssh_hosts

RUNS = int(os.environ.get('LP_SSH_FAULT_RUNS', '0'))
pytestmark = [needs_ssh_hosts, pytest.mark.timeout(180 * max(RUNS, 1)), pytest.mark.skipif(
    RUNS <= 0, reason='fault run; set LP_SSH_FAULT_RUNS=20 to run it')]


# Node processes (and their shells before ``exec``); not the host checks run before them,
# whose death after they answered changes nothing, so the program rightly runs on.
_NODE_MODULES = ('launchpad_py.node_side.remote_node_main', 'launchpad_py.node_side.host_agent',
                 'launchpad_py.nodes.colocation_child')


def _node_processes(token: str, launcher_pid: int) -> list[psutil.Process]:
    """The launch's node processes still running (a process may end while it is looked at)."""
    nodes = []
    for process in marked_processes(token):
        try:
            command = ' '.join(process.cmdline())
            if (process.pid != launcher_pid and process.name() != 'ssh'
                    and any(module in command for module in _NODE_MODULES)):
                nodes.append(process)
        except psutil.NoSuchProcess:
            pass
    return nodes


def _one_run(rng: random.Random) -> dict:
    token = f'lp-fault-{uuid.uuid4().hex}'
    launcher = subprocess.Popen([sys.executable, os.path.join(REPO, 'tests', 'ssh_nodes.py'),
                                 token], cwd=REPO, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL,
                                env={**os.environ, 'PYTHONPATH': os.path.join(REPO, 'tests')})
    delay = rng.uniform(0.0, 6.0)
    try:
        launcher.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        pass
    nodes = _node_processes(token, launcher.pid)
    victim = 'launcher' if rng.random() < 0.5 or not nodes else 'node'
    if victim == 'launcher':
        launcher.kill()
    else:
        try:
            rng.choice(nodes).kill()
        except psutil.NoSuchProcess:
            pass
    killed_at = time.monotonic()
    hang = False
    try:
        launcher.wait(timeout=60)
    except subprocess.TimeoutExpired:
        hang = True
        launcher.kill()
        launcher.wait()
    deadline = killed_at + (15 if not hang else 75)
    while marked_processes(token) and time.monotonic() < deadline:
        time.sleep(0.05)  # Polling the process table; no event announces a process's end.
    left = len(marked_processes(token))
    return {'victim': victim, 'delay': delay, 'nodes_up': len(nodes), 'hang': hang,
            'left': left, 'clean_s': time.monotonic() - killed_at}


def test_random_sigkills_leave_nothing_and_never_hang():
    """RUNS launches, one random SIGKILL each: 0 hangs, 0 processes left on any host."""
    rng = random.Random(int(os.environ.get('LP_SSH_FAULT_SEED', '11')))
    results = []
    for index in range(RUNS):
        result = _one_run(rng)
        results.append(result)
        print(f'run {index:2d}: killed {result["victim"]:8s} after {result["delay"]:.2f}s '
              f'({result["nodes_up"]} node processes up); hang={result["hang"]}, '
              f'left={result["left"]}, clean after {result["clean_s"]:.2f}s', flush=True)
    hangs = sum(r['hang'] for r in results)
    left = sum(r['left'] for r in results)
    print(f'{RUNS} runs ({sum(r["victim"] == "launcher" for r in results)} launcher kills, '
          f'{sum(r["victim"] == "node" for r in results)} node kills): {hangs} hangs, '
          f'{left} processes left; slowest cleanup {max(r["clean_s"] for r in results):.2f}s')
    assert hangs == 0 and left == 0
