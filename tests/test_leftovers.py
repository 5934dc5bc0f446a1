"""local_mp needs no short TMPDIR and leaves nothing behind but the logs a user asked for."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading

import psutil
import pytest

import launchpad_py as lp
from conftest import REPO, run_script, wait_for
from launchpad_py import courier
from launchpad_py.courier.transports import uds
from launchpad_py.supervision.launch_kit import rundir
from process_nodes import Describe

TERMINALS = ['current_terminal', 'output_to_files', pytest.param(
    'tmux_session', marks=pytest.mark.skipif(not shutil.which('tmux'),
                                             reason='tmux not installed'))]

# Runs a server node and a colocated one; prints the launcher's pid, the node pids and ports.
# Then: 'end' stops the program, 'kill_launcher' SIGKILLs the colocated node (so its socket
# stays: left alone, it may notice its supervisor's death and remove the socket first) and then
# the launcher itself.
_SCRIPT = '''
import json, os, sys
sys.path.insert(0, "tests")
import launchpad_py as lp
from process_nodes import Describe
terminal, then = sys.argv[1], sys.argv[2]
p = lp.Program("leftovers")
server, colocated = lp.CourierNode(Describe), lp.CourierNode(Describe)
p.add_node(server, label="server")
p.add_node(lp.MultiProcessingColocation([colocated]), label="together")
c = lp.launch(p, launch_type="local_mp", terminal=terminal)
clients = [n.create_handle().dereference() for n in (server, colocated)]
pids = [client.process()["pid"] for client in clients]
print(json.dumps({"launcher": os.getpid(), "nodes": pids,
                  "ports": [int(client.address.rsplit(":", 1)[1]) for client in clients]}),
      flush=True)
if then == "kill_launcher":
    os.kill(pids[1], 9)
    os.kill(os.getpid(), 9)
c.stop()
c.wait()
'''


def _run(tmpdir, terminal: str, then: str) -> dict:
    os.makedirs(tmpdir, exist_ok=True)
    result = run_script(_SCRIPT, terminal, then, env={**os.environ, 'TMPDIR': str(tmpdir)})
    if then == 'end':
        assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines, result.stderr
    info = json.loads(lines[-1])
    _, alive = psutil.wait_procs([psutil.Process(p) for p in info['nodes']
                                  if psutil.pid_exists(p)], timeout=30)
    assert not alive
    return info


def _sockets(ports) -> list[str]:
    return [path for path in map(uds.socket_path, ports) if os.path.exists(path)]


def _launch_directories() -> list[str]:
    base = uds.runtime_dir()
    return [os.path.join(base, name) for name in os.listdir(base) if name.startswith('launch-')]


def _dead_launch_directories() -> list[str]:
    return [path for path in _launch_directories() if rundir._owner_is_gone(path)]


def _live_launch_directories() -> list[str]:
    return [path for path in _launch_directories() if not rundir._owner_is_gone(path)]


@pytest.mark.parametrize('terminal', TERMINALS)
def test_long_tmpdir_is_fine(tmp_path, terminal):
    """With a TMPDIR of 150+ characters, local_mp launches, serves and stops."""
    tmpdir = tmp_path / ('long_directory_name_' * 8)
    assert len(str(tmpdir)) > 150
    info = _run(tmpdir, terminal, 'end')
    assert len(info['nodes']) == 2


def test_program_that_ends_leaves_only_its_logs(tmp_path):
    """After a normal end: the log files asked for, and nothing else anywhere."""
    info = _run(tmp_path / 'tmp', 'output_to_files', 'end')
    [logs] = os.listdir(tmp_path / 'tmp')
    assert sorted(os.listdir(tmp_path / 'tmp' / logs)) == ['server_0.log', 'together_0.log']
    assert _sockets(info['ports']) == []
    assert _dead_launch_directories() == []


@pytest.mark.parametrize('launch_type', ['test_mp', 'test_mt'])
def test_next_start_removes_what_a_killed_launcher_left(tmp_path, launch_type):
    """What a launcher killed with SIGKILL left, the next launch of any kind removes."""
    info = _run(tmp_path / 'tmp', 'current_terminal', 'kill_launcher')
    # The colocated node died by SIGKILL: its socket stayed.
    assert _sockets(info['ports']), 'nothing was left to clean: the test proves nothing'
    program = lp.Program('next_start')
    program.add_node(lp.CourierNode(Describe), label='next')
    with lp.launch(program, launch_type=launch_type):
        assert _sockets(info['ports']) == []
        assert _dead_launch_directories() == []
    assert os.listdir(tmp_path / 'tmp') == []


def test_socket_of_a_killed_node_goes_when_its_program_ends():
    """A node killed with SIGKILL cannot remove its socket; its program's end does."""
    program = lp.Program('killed_node')
    handle = program.add_node(lp.CourierNode(Describe), label='victim')
    controller = lp.launch(program, launch_type='test_mp')
    client = handle.dereference()
    port = int(client.address.rsplit(':', 1)[1])
    os.kill(client.process()['pid'], signal.SIGKILL)
    with pytest.raises(lp.NodeFailedError, match="'victim'"):
        controller.wait(timeout=60)
    assert _sockets([port]) == []


def test_sweep_removes_only_what_is_dead(tmp_path):
    """Live servers and another running program keep their files; a dead socket goes."""
    stale = uds.socket_path(1)  # Port 1: never a courier server's.
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(stale)
    dead.close()
    launcher = subprocess.Popen(
        [sys.executable, os.path.join(REPO, 'tests', 'scripts', 'long_running.py'),
         str(tmp_path / 'log')], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    with courier.Server(Describe()) as server:
        assert launcher.stdout.readline(), launcher.stderr.read()
        live = _live_launch_directories()
        assert live, 'the running launcher has no launch directory'
        rundir.sweep()
        assert not os.path.exists(stale)
        assert os.path.exists(server.local_path)
        assert all(os.path.isdir(path) for path in live)
        out, err = launcher.communicate('stop\n', timeout=60)
    assert launcher.returncode == 0, err


def test_sweep_does_not_dial_live_servers():
    """A live server's socket is kept without being dialed: every launch on the machine sweeps,
    and a dial starts the accept thread of each live node of every other program."""
    live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path = uds.socket_path(2)  # Port 2: never a courier server's.
    live.bind(path)
    live.listen(8)
    live.setblocking(False)
    try:
        uds.remove_stale_sockets()
        assert os.path.exists(path)
        with pytest.raises(BlockingIOError):  # Nobody connected.
            live.accept()[0].close()
    finally:
        live.close()
        os.unlink(path)


def test_process_ending_without_stopping_its_server_removes_the_socket():
    """A script that exits with a courier server still running leaves no socket file."""
    result = run_script('from launchpad_py import courier\n'
                        'server = courier.Server(object()).start()\n'
                        'print(server.local_path, flush=True)\n')
    assert result.returncode == 0, result.stderr
    path = result.stdout.strip()
    assert path.endswith('.sock') and not os.path.exists(path)


def test_repeated_local_mt_launches_leave_no_threads_behind(tmp_path):
    """Clients a program's nodes made to its servers go with the program: launching it again
    and again in one process does not pile up their connections' reader threads."""
    from scale_nodes import fan_out_program

    def run_once() -> int:
        lp.launch(fan_out_program(20), launch_type='local_mt').wait(timeout=120)
        return threading.active_count()

    after_first = run_once()  # Process-wide helpers (e.g. the deadline timer) start once.
    for _ in range(3):
        run_once()
    # Before: 20 reader threads more per launch, for good.
    wait_for(lambda: threading.active_count() <= after_first, timeout=30,
             what=f'threads back to {after_first} (now {threading.active_count()})')
