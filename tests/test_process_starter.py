"""local_mp starts nodes by forking a warm server, keeping every behaviour of exec."""

from __future__ import annotations

import os
import sys

import psutil
import pytest

import launchpad_py as lp
from conftest import run_script
from process_nodes import Describe


def _launch(resources=None, nodes=1, message=None):
    program = lp.Program('starter')
    with program.group('nodes'):
        handles = [program.add_node(lp.CourierNode(Describe, message)) for _ in range(nodes)]
    return program, handles, dict(local_resources=resources) if resources else {}


def test_nodes_are_forked_in_their_own_sessions():
    """Forked nodes are children of the fork server, each the leader of its own session."""
    program, handles, kwargs = _launch(nodes=3)
    with lp.launch(program, launch_type='local_mp', terminal='output_to_files', **kwargs):
        infos = [h.dereference().process() for h in handles]
    assert len({info['ppid'] for info in infos}) == 1 and infos[0]['ppid'] != os.getpid()
    for info in infos:
        assert info['pgid'] == info['pid'] == info['sid']


def test_group_env_reaches_forked_nodes():
    """A group's env is the node's environment, also when forked."""
    program, handles, kwargs = _launch({'nodes': lp.PythonProcess(env={'LP_TEST_MARKER': 'x1'})})
    with lp.launch(program, launch_type='local_mp', terminal='output_to_files', **kwargs):
        info = handles[0].dereference().process()
    assert info['marker'] == 'x1' and info['ppid'] != os.getpid()


def test_exec_time_env_falls_back_to_exec():
    """A group env naming a PYTHON* variable is exec'd directly by the launcher."""
    program, handles, kwargs = _launch({'nodes': lp.PythonProcess(env={'PYTHONLP_TEST': 'y'})})
    with lp.launch(program, launch_type='local_mp', terminal='output_to_files', **kwargs):
        info = handles[0].dereference().process()
    assert info['ppid'] == os.getpid() and info['pythonpath_marker'] == 'y'


def test_other_interpreter_falls_back_to_exec(tmp_path):
    """A group with another interpreter path is exec'd with that interpreter."""
    other = tmp_path / 'python'
    other.symlink_to(os.path.realpath(sys.executable))
    program, handles, kwargs = _launch({'nodes': lp.PythonProcess(interpreter=str(other))})
    with lp.launch(program, launch_type='local_mp', terminal='output_to_files', **kwargs):
        info = handles[0].dereference().process()
    assert info['ppid'] == os.getpid()


def test_forked_node_output_is_captured():
    """A forked node's prints reach the launcher's output with the node prefix."""
    result = run_script(
        'import sys; sys.path.insert(0, "tests")\n'
        'import launchpad_py as lp\n'
        'from process_nodes import Describe\n'
        'p = lp.Program("out")\n'
        'h = p.add_node(lp.CourierNode(Describe, "hello from the node"), label="talker")\n'
        'with lp.launch(p, launch_type="local_mp"):\n'
        '    h.dereference().process()\n')
    assert result.returncode == 0, result.stderr
    assert '[talker/0] hello from the node' in result.stdout


def test_stop_leaves_no_process_behind():
    """After stop, neither the nodes nor the fork server are running."""
    program, handles, kwargs = _launch(nodes=4)
    controller = lp.launch(program, launch_type='local_mp', terminal='output_to_files', **kwargs)
    pids = [h.dereference().process()['pid'] for h in handles]
    server = psutil.Process(psutil.Process(pids[0]).ppid())
    controller.stop()
    controller.wait(timeout=60)
    gone, alive = psutil.wait_procs([psutil.Process(p) for p in pids if psutil.pid_exists(p)]
                                    + [server], timeout=30)
    assert not alive


def test_killing_the_launcher_kills_forked_nodes():
    """A launcher killed with SIGKILL takes its fork server and forked nodes with it."""
    script = ('import sys, os; sys.path.insert(0, "tests")\n'
              'import launchpad_py as lp\n'
              'from process_nodes import Describe\n'
              'p = lp.Program("orphans")\n'
              'hs = [p.add_node(lp.CourierNode(Describe), label="n") for _ in range(2)]\n'
              'c = lp.launch(p, launch_type="local_mp", terminal="output_to_files")\n'
              'print(" ".join(str(h.dereference().process()["pid"]) for h in hs), flush=True)\n'
              'os.kill(os.getpid(), 9)\n')
    result = run_script(script)
    pids = [int(p) for p in result.stdout.strip().splitlines()[-1].split()]
    procs = [psutil.Process(p) for p in pids if psutil.pid_exists(p)]
    _, alive = psutil.wait_procs(procs, timeout=30)
    assert not alive


def test_fork_server_serves_descriptors_numbered_past_1024(tmp_path):
    """Past ~1,000 nodes the fork server's descriptors (a pidfd per child) are numbered over
    1,024, where select() raised ValueError and the server died mid-launch (2,000 nodes). Here
    its socket gets such a number from the start: a node is still forked and reports."""
    import resource
    import socket
    from launchpad_py.launchers.local import process_starter
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f'the hard limit on open files ({hard}) is below 1,200')
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    fillers = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]  # The next fds are > 1024.
    try:
        server = process_starter.ForkServer.start(os.environ.copy(), die_with_parent=False)
        try:
            ours, theirs = socket.socketpair()
            with ours, theirs, open(tmp_path / 'out', 'wb') as out:
                # No spec there: the node process starts, reports the error, exits 1.
                process = server.spawn(str(tmp_path / 'no_spec'), os.environ.copy(),
                                       str(tmp_path), out.fileno(), out.fileno(), theirs.fileno())
                assert process.wait() == 1
            assert 'no_spec' in (tmp_path / 'out').read_text()
        finally:
            server.close()
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
