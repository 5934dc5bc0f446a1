"""A remote node that said hello and waits for its executable: what it hears meanwhile.

The node is a real ``remote_node_main`` process; the test is its launcher (the control
listener it dials, the bootstrap on its stdin). Until every node has reported its
address nobody is sent 'run', and the launcher may meanwhile send what it sends at
any time: 'moved' (a peer's pod was evicted), 'metrics' (statistics asked for).
Only 'stop' calls the node's run off.
"""

from __future__ import annotations

import json
import queue
import secrets
import select
import subprocess
import sys

import pytest

from launchpad_py.node_side import control_channel
from conftest import REPO


@pytest.fixture
def waiting_node():
    """A node process dialed in and waiting for 'run': (process, the launcher's channel)."""
    hellos = queue.Queue()
    server = control_channel.ControlServer(('127.0.0.1', 0), lambda *hello: hellos.put(hello),
                                           family='AF_INET')
    boot = {'control': list(server.address), 'key': server.key.hex(),
            'secret': secrets.token_bytes(32).hex(), 'worker_id': 'peer/0', 'addresses': 1,
            'bind': None, 'heartbeat_timeout': None, 'host_timeout': None, 'host_env': None}
    process = subprocess.Popen([sys.executable, '-m', 'launchpad_py.node_side.remote_node_main'],
                               stdin=subprocess.PIPE, cwd=REPO)
    process.stdin.write(json.dumps(boot).encode() + b'\n')
    process.stdin.flush()  # Left open: its end would tell the node its launcher is gone.
    channel = None
    try:
        hello, channel = hellos.get(timeout=30)
        assert hello[:2] == ('hello', 'peer/0'), hello
        yield process, channel
    finally:
        if channel is not None:
            channel.close()
        server.close()
        process.stdin.close()  # The node ends itself (its launcher gone) if it still runs.
        try:
            process.wait(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)


def _next(channel, seconds: float = 30):
    """The node's next message; EOFError if it ended instead."""
    assert select.select([channel.fileno()], [], [], seconds)[0], \
        f'the node said nothing within {seconds}s'
    return channel.recv()


def test_a_peer_moved_before_run_does_not_end_the_waiting_node(waiting_node):
    """'moved' (a peer's pod evicted during the launch) then 'metrics': the node goes on
    waiting and answers the metrics request. It took any message but 'run' for a stop and
    ended with exit code 0, so every node of a launch whose first pod was evicted ended
    together, and the program "failed to start" (3 of 100 podman fault runs)."""
    process, channel = waiting_node
    channel.send('moved', ['10.250.0.12:23456'])
    channel.send('metrics', 7)
    answer = _next(channel)
    assert answer[:2] == ('metrics', 7) and isinstance(answer[2], dict), answer
    assert process.poll() is None


def test_a_stop_before_run_ends_the_waiting_node_cleanly(waiting_node):
    """'stop' before 'run' (the launch called off): the node ends without running, code 0."""
    process, channel = waiting_node
    channel.send('members', {})
    channel.send('stop')
    assert process.wait(timeout=30) == 0
    with pytest.raises(EOFError):
        _next(channel)
