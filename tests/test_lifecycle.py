"""Process lifecycle of local_mp programs: no orphans, Ctrl-C, grace period, flags."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import psutil
import pytest

from conftest import REPO

SCRIPTS = os.path.join(REPO, 'tests', 'scripts')


def _start(script: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, os.path.join(SCRIPTS, script), *args], cwd=REPO,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _node_processes(launcher: subprocess.Popen) -> list[psutil.Process]:
    """Reads the node pids the launcher prints once the program is ready."""
    line = launcher.stdout.readline()
    assert line, f'launcher printed nothing; stderr:\n{launcher.stderr.read()}'
    return [psutil.Process(pid) for pid in json.loads(line)]


def _finish(launcher: subprocess.Popen, timeout: float = 60) -> tuple[str, str]:
    out, err = launcher.communicate(timeout=timeout)
    return out, err


def test_sigkill_of_the_launcher_leaves_no_node_alive(tmp_path):
    """SIGKILL of the launching process takes every node process with it."""
    launcher = _start('long_running.py', str(tmp_path / 'log'))
    nodes = _node_processes(launcher)
    assert len(nodes) == 2 and all(n.is_running() for n in nodes)
    launcher.kill()
    launcher.wait(30)
    _, alive = psutil.wait_procs(nodes, timeout=30)
    for process in alive:
        process.kill()
    assert not alive, f'orphaned node processes: {alive}'
    launcher.stdout.close()
    launcher.stderr.close()
    launcher.stdin.close()


def test_ctrl_c_stops_gracefully_and_exits_zero(tmp_path):
    """SIGINT runs the nodes' stop handlers, ends every node, and the launcher exits 0."""
    log = tmp_path / 'log'
    launcher = _start('long_running.py', str(log))
    nodes = _node_processes(launcher)
    launcher.send_signal(signal.SIGINT)
    out, err = _finish(launcher)
    assert launcher.returncode == 0, err
    assert log.read_text().splitlines() == ['waiter']
    _, alive = psutil.wait_procs(nodes, timeout=10)
    assert not alive


def test_stop_requested_from_the_launcher_exits_zero(tmp_path):
    """lp.stop() in the launching process ends the program; exit status 0."""
    launcher = _start('long_running.py', str(tmp_path / 'log'))
    nodes = _node_processes(launcher)
    out, err = launcher.communicate('stop\n', timeout=60)
    assert launcher.returncode == 0, err
    assert 'killed: \n' in out
    _, alive = psutil.wait_procs(nodes, timeout=10)
    assert not alive


def test_node_ignoring_stop_is_killed_after_grace_and_launcher_exits_zero(tmp_path):
    """Only the stubborn worker is killed after the grace period; the launcher reports it."""
    launcher = _start('long_running.py', str(tmp_path / 'log'), '--stubborn',
                      '--lp_termination_notice_secs=1')
    nodes = _node_processes(launcher)
    out, err = launcher.communicate('stop\n', timeout=60)
    assert launcher.returncode == 0, err
    assert 'killed: stubborn/0' in out
    assert 'grace period' in err
    _, alive = psutil.wait_procs(nodes, timeout=10)
    assert not alive


def test_flags_of_the_launching_script_reach_node_processes():
    """A flag defined and parsed in __main__ is visible in local_mp nodes; group args override."""
    result = subprocess.run([sys.executable, os.path.join(SCRIPTS, 'flags_in_nodes.py'),
                             '--greeting=hello', '--lp_termination_notice_secs=3'],
                            capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert 'plain sees greeting=hello termination=3' in result.stdout
    assert 'overridden sees greeting=from_group_args termination=3' in result.stdout


@pytest.mark.parametrize('launch_type', ['local_mt', 'local_mp'])
def test_failure_nobody_waited_for_fails_the_script(launch_type):
    """A script that never calls wait() still exits 1 and prints the node's traceback."""
    result = subprocess.run([sys.executable, os.path.join(SCRIPTS, 'unwaited_failure.py'),
                             launch_type], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 1
    assert "node 'failer'" in result.stderr
    assert 'RuntimeError: nobody waits for me' in result.stderr


def test_local_mt_script_returning_after_launch_keeps_serving():
    """Interpreter exit waits for a local_mt program before thread pools shut down."""
    result = subprocess.run([sys.executable, os.path.join(SCRIPTS, 'returns_after_launch.py')],
                            capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert 'total 2450' in result.stdout
    assert 'cannot schedule new futures' not in result.stderr
