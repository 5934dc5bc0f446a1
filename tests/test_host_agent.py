"""The host agent on its own (``python -m launchpad_py.node_side.host_agent``), fed by a pipe.

A node here dials a listener of the test's that accepts and never answers, so it stays
alive, blocked before its hello, for as long as the agent lets it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import psutil
import pytest

from launchpad_py.courier import open_files
from conftest import wait_for


def _boot(listener: socket.socket) -> dict:
    return {'control': list(listener.getsockname()), 'key': '00' * 32, 'secret': '00' * 32,
            'worker_id': 'w/0', 'addresses': 0, 'bind': None, 'heartbeat_timeout': None,
            'host_env': None}


@pytest.fixture
def silent_launcher():
    """A listener that accepts control connections and never says a word."""
    with socket.create_server(('127.0.0.1', 0)) as listener:
        yield listener


def _start_agent(pass_fds=()) -> subprocess.Popen:
    agent = subprocess.Popen([sys.executable, '-m', 'launchpad_py.node_side.host_agent'],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, pass_fds=pass_fds)
    _ask(agent, {'timeout': 600})  # No pings here: a loaded machine must not end it first.
    return agent


def _ask(agent: subprocess.Popen, request: dict) -> None:
    agent.stdin.write(json.dumps(request).encode() + b'\n')
    agent.stdin.flush()


def _started_pid(agent: subprocess.Popen, node_id: int) -> int:
    kind, got, pid = agent.stdout.readline().split()
    assert (kind, int(got)) == (b's', node_id)
    return int(pid)


def test_closing_the_agents_stdin_kills_its_nodes(silent_launcher):
    """The session ending (stdin closed) ends every node the agent started, and the agent."""
    agent = _start_agent()
    for node_id in range(3):
        _ask(agent, {'start': node_id, 'boot': _boot(silent_launcher)})
    pids = [_started_pid(agent, node_id) for node_id in range(3)]
    assert all(psutil.Process(pid).ppid() == agent.pid for pid in pids)
    agent.stdin.close()
    assert agent.wait(timeout=30) == 0
    agent.stdout.close()
    wait_for(lambda: not any(psutil.pid_exists(pid) for pid in pids), timeout=15,
             what='the nodes to end with their agent')


def test_a_killed_node_is_reported_with_its_signal(silent_launcher):
    """``kill`` ends the node's process group; the agent reports its exit as -9."""
    agent = _start_agent()
    _ask(agent, {'start': 7, 'boot': _boot(silent_launcher)})
    _started_pid(agent, 7)
    _ask(agent, {'kill': 7})
    assert agent.stdout.readline().split() == [b'x', b'7', b'-9']
    agent.stdin.close()
    agent.wait(timeout=30)
    agent.stdout.close()


def test_agent_serves_nodes_whose_descriptors_are_above_1023(silent_launcher):
    """Three descriptors a node: ~340 nodes on one host pass descriptor 1023, where select()
    fails. Here the agent starts with 1,100 descriptors open, so its first node's are above."""
    if open_files.raise_soft_limit() < 1300:
        pytest.skip('needs 1,300 open files (RLIMIT_NOFILE) to hold descriptors above 1023')
    null = os.open(os.devnull, os.O_RDONLY)
    held = [os.dup(null) for _ in range(1100)]
    try:
        agent = _start_agent(pass_fds=held)
    finally:
        for fd in [null, *held]:
            os.close(fd)
    _ask(agent, {'start': 0, 'boot': _boot(silent_launcher)})
    _started_pid(agent, 0)
    _ask(agent, {'kill': 0})
    assert agent.stdout.readline().split() == [b'x', b'0', b'-9']
    agent.stdin.close()
    assert agent.wait(timeout=30) == 0
    agent.stdout.close()


# A stand-in for an agent's session: it reports node 0 killed by SIGKILL as soon as asked to
# start it, then ends at once (the signal that killed the node ends the agent too) or lives on.
_KILLED_WITH_ITS_AGENT = r'''
import sys
for line in sys.stdin:
    if '"start"' in line:
        print('x 0 -9', flush=True)
        if sys.argv[1] == 'ends':
            sys.exit(137)
'''


def _fake_agent(fate: str):
    from launchpad_py.launchers.remote.host_agents import AgentStarter, HostAgent
    agent = HostAgent(['fake-agent'], 'h1', open_session=lambda: subprocess.Popen(
        [sys.executable, '-c', _KILLED_WITH_ITS_AGENT, fate], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True))
    starter = AgentStarter(agent)
    agent.start(starter, {})
    return agent, starter


def test_a_node_killed_together_with_its_agent_is_lost_with_the_host():
    """Slurm's scancel of an agent's step kills the agent and its node with one signal; the
    agent can report its node killed just before it dies itself. The node was counted as
    failed (a flaky restart test under Slurm); it is lost with its host, like its siblings."""
    agent, starter = _fake_agent('ends')
    try:
        assert starter.wait() == -9
        assert starter.lost_by() == 'host_lost'
    finally:
        agent.close()


def test_a_node_killed_while_its_agent_lives_on_failed():
    agent, starter = _fake_agent('lives')
    try:
        assert starter.wait() == -9
        assert starter.lost_by() is None
    finally:
        agent.close()
