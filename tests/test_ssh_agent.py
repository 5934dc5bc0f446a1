"""The SSH launcher's per-host agent: one ssh session per host, whatever the number of nodes.

Uses the namespace hosts of ../shared/infra/ssh_hosts.sh; they share this
machine's process table, so the agent and its nodes are visible here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import uuid

import psutil
import pytest

import launchpad_py as lp
from conftest import SSH_DIR, host_name, marked_processes, needs_ssh_hosts, ssh_host, wait_for
from nodes_for_tests import Pinger, serve_forever

pytestmark = needs_ssh_hosts

_AGENT = 'launchpad_py.node_side.host_agent'


def _ssh_clients() -> list[psutil.Process]:
    """This process's ssh clients that run a host agent."""
    return [p for p in psutil.Process().children() if p.name() == 'ssh'
            and _AGENT in ' '.join(p.cmdline())]


@pytest.fixture
def host_with_default_sshd(tmp_path):
    """h2 reached through a second sshd there (port 2223) with sshd's default limits
    (``MaxStartups 10:30:100``, ``MaxSessions 10``), as on a host nobody tuned."""
    with open(os.path.join(SSH_DIR, 'sshd_config-lp-h2')) as config:
        lines = [line for line in config.read().splitlines()
                 if not line.startswith(('Port ', 'PidFile ', 'MaxStartups ', 'MaxSessions '))]
    pid_file = tmp_path / 'sshd.pid'
    (tmp_path / 'sshd_config').write_text('\n'.join(
        [*lines, 'Port 2223', f'PidFile {pid_file}']) + '\n')
    # sshd listens before it daemonizes: once this returns, it accepts connections.
    subprocess.run(['nsenter', '--net=/run/netns/lp-h2', '/usr/sbin/sshd', '-f',
                    str(tmp_path / 'sshd_config'), '-E', str(tmp_path / 'sshd.log')],
                   check=True, timeout=30)
    try:
        yield ssh_host('h2', port=2223)
    finally:
        os.kill(int(pid_file.read_text()), signal.SIGTERM)


def test_sixty_nodes_on_a_host_whose_sshd_has_default_max_startups(host_with_default_sshd):
    """60 courier nodes start on one host through one ssh session, and all answer: an ssh
    connection per node would meet sshd's default MaxStartups (10 unauthenticated at once)."""
    program = lp.Program('sixty')
    with program.group('pinger'):
        handles = [program.add_node(lp.CourierNode(Pinger)) for _ in range(60)]
    with lp.launch(program, launch_type='ssh',
                   resources={'pinger': host_with_default_sshd}) as controller:
        assert len(_ssh_clients()) == 1
        assert {s.host for s in controller.statuses()} == {'h2:2223'}
        assert [h.dereference().ping(i) for i, h in enumerate(handles)] == [
            ('pong', i) for i in range(60)]


@pytest.mark.parametrize('victim', ['ssh client', 'agent'])
def test_lost_session_or_agent_ends_every_node_of_that_host(victim):
    """SIGKILL the host's ssh client (here) or its agent (there): all four nodes on that
    host end, and the program fails naming the lost session."""
    token = f'lp-agent-{uuid.uuid4().hex}'
    program = lp.Program('lost_agent')
    with program.group('waiter'):
        for _ in range(4):
            program.add_node(lp.PyNode(serve_forever))
    controller = lp.launch(program, launch_type='ssh', resources={
        'waiter': ssh_host('h1', env={'LP_TEST_TOKEN': token})})
    pids = [s.pid for s in controller.statuses()]
    agents = {psutil.Process(pid).parent() for pid in pids}
    assert len(agents) == 1 and _AGENT in ' '.join(next(iter(agents)).cmdline())
    (client,) = _ssh_clients()
    (client if victim == 'ssh client' else next(iter(agents))).kill()
    wait_for(lambda: not marked_processes(token), timeout=15,
             what=f'the nodes of {token} to end')
    with pytest.raises(lp.NodeFailedError, match=rf"agent session on {host_name('h1')} ended"):
        controller.wait(timeout=30)
