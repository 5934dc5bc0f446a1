"""A remote node's watch on its launcher's heartbeat (``remote_node_main.HeartbeatChannel``).

The node runs in a process of its own, its channel one end of a socket pair
whose other end the test holds as the launcher: the test pings, stays silent,
closes, and stops the node process (SIGSTOP) as an overloaded machine would
leave it without a CPU. The host watch (TCP keepalive) is tried against a
network namespace of the test's own whose packets it drops.
"""

from __future__ import annotations

import multiprocessing.connection as mpc
import os
import shutil
import select
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import REPO

_NODE = '''
import multiprocessing.connection as mpc, sys
from launchpad_py.node_side.remote_node_main import HeartbeatChannel
channel = HeartbeatChannel(mpc.Connection(int(sys.argv[1])), float(sys.argv[2]))
while True:
    try:
        print(channel.recv()[0], flush=True)
    except EOFError as exc:
        print('ended:', exc, flush=True)
        break
'''


@pytest.fixture
def node():
    """Starts a node watching a heartbeat of ``timeout`` seconds: (process, launcher end)."""
    started = []

    def start(timeout: float):
        ours, theirs = socket.socketpair()
        process = subprocess.Popen([sys.executable, '-c', _NODE, str(theirs.fileno()),
                                    str(timeout)], pass_fds=[theirs.fileno()], cwd=REPO,
                                   stdout=subprocess.PIPE, text=True)
        theirs.close()
        launcher = mpc.Connection(ours.detach())
        started.append((process, launcher))
        return process, launcher

    yield start
    for process, launcher in started:
        launcher.close()
        process.send_signal(signal.SIGCONT)
        process.kill()
        process.wait(timeout=30)
        process.stdout.close()


def _line_within(process: subprocess.Popen, seconds: float) -> str | None:
    """The node's next line, if it says one within ``seconds``."""
    if not select.select([process.stdout], [], [], seconds)[0]:
        return None
    return process.stdout.readline().strip()


def _heard(process: subprocess.Popen, launcher: mpc.Connection) -> None:
    launcher.send(('ping',))
    assert _line_within(process, 30) == 'ping'


def test_a_node_stalled_longer_than_the_timeout_does_not_blame_its_launcher(node):
    """The node process gets no CPU for 1.5 timeouts (SIGSTOP), and neither did the launcher
    meanwhile (no ping): resumed, the node keeps waiting and hears the next ping. It counted
    the stall as silence and ended itself at once, as hundreds of pods starting on two cores
    did."""
    process, launcher = node(2.0)
    _heard(process, launcher)
    process.send_signal(signal.SIGSTOP)
    threading.Event().wait(3.0)  # The stall (the scenario, not a synchronization).
    process.send_signal(signal.SIGCONT)
    assert _line_within(process, 0.5) is None  # Still waiting, not ended.
    _heard(process, launcher)


def test_a_silent_launcher_still_ends_the_node_after_the_timeout(node):
    """A launcher that says nothing more (its host vanished) ends the node after the
    timeout: not sooner, and not much later on a machine where the node gets to run."""
    process, launcher = node(1.0)
    _heard(process, launcher)
    silent_since = time.monotonic()
    line = _line_within(process, 30)
    waited = time.monotonic() - silent_since
    assert line == 'ended: no heartbeat from the launcher for 1s'
    assert 0.9 <= waited < 15


def test_a_closed_launcher_ends_the_node_at_once(node):
    """The launcher's end of the channel closing (it was killed) ends the node without
    waiting for the heartbeat's timeout."""
    process, launcher = node(60.0)
    _heard(process, launcher)
    launcher.close()
    assert (_line_within(process, 30) or '').startswith('ended')


_NODE_ON_HOST = '''
import multiprocessing.connection as mpc, socket, sys
from launchpad_py.node_side.remote_node_main import HeartbeatChannel, _watch_host
connection = mpc.Connection(socket.create_connection((sys.argv[1], int(sys.argv[2]))).detach())
_watch_host(connection, 2.0)
channel = HeartbeatChannel(connection, 60.0)
while True:
    try:
        print(channel.recv()[0], flush=True)
    except (EOFError, OSError) as exc:
        print('ended:', channel.why_ended, flush=True)
        break
'''


def _ip(*args: str) -> None:
    subprocess.run(['ip', *args], check=True, capture_output=True, timeout=30)


@pytest.fixture
def other_host():
    """A network namespace of its own behind a veth pair: (its name, our address there).
    Dropping its packets (iptables in it) makes it a host gone from the network."""
    if os.geteuid() != 0:
        pytest.skip('a network namespace of its own needs root')
    if shutil.which('iptables') is None:
        pytest.skip('iptables is not installed (apt-get install iptables); it drops the '
                    "namespace host's packets")
    tag = os.getpid() % 50000
    name, ours, theirs = f'lphb{tag}', f'lphb{tag}a', f'lphb{tag}b'
    subnet = f'10.253.{tag % 250}'
    _ip('netns', 'add', name)
    try:
        _ip('link', 'add', ours, 'type', 'veth', 'peer', 'name', theirs)
        _ip('link', 'set', theirs, 'netns', name)
        _ip('addr', 'add', f'{subnet}.1/30', 'dev', ours)
        _ip('link', 'set', ours, 'up')
        _ip('netns', 'exec', name, 'ip', 'addr', 'add', f'{subnet}.2/30', 'dev', theirs)
        _ip('netns', 'exec', name, 'ip', 'link', 'set', theirs, 'up')
        yield name, f'{subnet}.1'
    finally:
        subprocess.run(['ip', 'link', 'del', ours], capture_output=True, timeout=30)
        _ip('netns', 'del', name)


def test_a_launcher_host_gone_from_the_network_ends_the_node_within_its_host_timeout(
        other_host):
    """The launcher's host stops answering (its packets dropped, no FIN ever comes): the node
    ends after about its host timeout (2 s here), long before its silence timeout (60 s). The
    kernel's keepalive tells, so it needs no CPU of the launcher process."""
    namespace, address = other_host
    with socket.create_server((address, 0)) as server:
        process = subprocess.Popen(['ip', 'netns', 'exec', namespace, sys.executable, '-c',
                                    _NODE_ON_HOST, address, str(server.getsockname()[1])],
                                   cwd=REPO, stdout=subprocess.PIPE, text=True)
        server.settimeout(30)
        launcher = mpc.Connection(server.accept()[0].detach())
    try:
        _heard(process, launcher)
        subprocess.run(['ip', 'netns', 'exec', namespace, 'iptables', '-A', 'INPUT', '-j',
                        'DROP'], check=True, capture_output=True, timeout=30)
        gone_since = time.monotonic()
        line = _line_within(process, 30)
        waited = time.monotonic() - gone_since
        assert line == "ended: the launcher's host stopped answering"
        assert waited < 15
    finally:
        launcher.close()
        process.kill()
        process.wait(timeout=30)
        process.stdout.close()
