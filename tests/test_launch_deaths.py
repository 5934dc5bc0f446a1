"""local_mp when one of a program's processes dies: no hang, the right name, nothing left."""

from __future__ import annotations

import os
import random
import signal
import socket
import threading
import time

import psutil
import pytest

import launchpad_py as lp
from conftest import wait_for
from launchpad_py.supervision import controller as controller_module
from launchpad_py.launchers.local import process_starter
from process_nodes import Describe, call_until_stopped

_STARTER = 'launchpad_py.node_side.fork_server'
_SLOW = {'slow': lp.PythonProcess(env={'LAUNCHPAD_PY_PRELOAD': 'slow_start'})}


class _Outcome:
    """Runs ``lp.launch`` (and ``wait``) in a thread and keeps what it returned or raised."""

    def __init__(self, program, wait=False, **kwargs):
        self.controller = self.error = None
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(program, wait, kwargs),
                                        name='test-launch', daemon=True)
        self._thread.start()

    def _run(self, program, wait, kwargs):
        try:
            self.controller = lp.launch(program, launch_type='test_mp', **kwargs)
            if wait:
                self.controller.wait()
        except BaseException as exc:
            self.error = exc
        finally:
            self.done.set()

    def result(self, timeout):
        assert self.done.wait(timeout), f'lp.launch still running after {timeout}s'
        self._thread.join(timeout)
        return self.error


def _fork_server() -> psutil.Process:
    def find():
        for child in psutil.Process().children():
            try:
                if _STARTER in ' '.join(child.cmdline()):
                    return child
            except psutil.NoSuchProcess:
                pass
    return wait_for(find, timeout=30, what='the fork server to start')


def test_fork_server_killed_while_nodes_start_fails_the_launch():
    """SIGKILL of the fork server before every node is ready: LaunchError naming it, quickly."""
    program = lp.Program('starter_dies')
    program.add_node(lp.CourierNode(Describe), label='fine')
    with program.group('slow'):
        program.add_node(lp.CourierNode(Describe))
    outcome = _Outcome(program, local_resources=_SLOW)
    server = _fork_server()
    server.kill()
    killed_at = time.monotonic()
    error = outcome.result(timeout=30)
    assert time.monotonic() - killed_at < 5
    assert isinstance(error, lp.LaunchError), error
    assert f'fork server (pid {server.pid})' in str(error) and 'SIGKILL' in str(error)


def test_fork_server_death_after_launch_leaves_nodes_running():
    """Once launched, the nodes outlive their fork server and keep answering calls."""
    program = lp.Program('orphaned_nodes')
    handles = [program.add_node(lp.CourierNode(Describe), label='node') for _ in range(2)]
    with lp.launch(program, launch_type='test_mp') as controller:
        infos = [handle.dereference().process() for handle in handles]
        server = psutil.Process(infos[0]['ppid'])
        server.kill()
        server.wait(30)
        assert [handle.dereference().process()['pid'] for handle in handles] == [
            info['pid'] for info in infos]
        assert controller.is_running


def test_failure_after_fork_server_death_names_the_node_that_died():
    """With the fork server gone, a node's death is reported for that node, not another."""
    program = lp.Program('names_the_dead')
    writer = program.add_node(lp.CourierNode(Describe), label='writer')
    victim = program.add_node(lp.CourierNode(Describe), label='victim')
    controller = lp.launch(program, launch_type='test_mp')
    server = psutil.Process(writer.dereference().process()['ppid'])
    server.kill()
    server.wait(30)
    os.kill(victim.dereference().process()['pid'], signal.SIGKILL)
    with pytest.raises(lp.NodeFailedError, match="'victim'") as info:
        controller.wait(timeout=30)
    assert 'writer' not in str(info.value)


def test_processes_start_after_the_fork_server_died(tmp_path):
    """A fork server whose process died starts a new one for the next node (restarts need it)."""
    server = process_starter.ForkServer.start(os.environ.copy(), die_with_parent=False)
    try:
        first = server.pid
        psutil.Process(first).kill()
        wait_for(lambda: not server.alive, timeout=30, what='the fork server death to be seen')
        ours, theirs = socket.socketpair()
        with ours, theirs, open(tmp_path / 'out', 'wb') as out:
            # No spec there: the node process starts, reports the error, exits 1.
            process = server.spawn(str(tmp_path / 'no_spec'), os.environ.copy(), str(tmp_path),
                                   out.fileno(), out.fileno(), theirs.fileno())
            assert process.wait() == 1
        assert server.alive and server.pid != first
        assert 'no_spec' in (tmp_path / 'out').read_text()
    finally:
        server.close()


def _kill_random_node(rng: random.Random, latest: float, outcome: _Outcome) -> str | None:
    """SIGKILLs a random node of the running program at a random moment; returns its name."""
    outcome.done.wait(rng.uniform(0, latest))
    programs = wait_for(lambda: controller_module.running_programs() or outcome.done.is_set(),
                        timeout=30, what='the program')
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not outcome.done.is_set():
        started = [s for s in programs[0].statuses() if s.pid is not None]
        if started:
            status = rng.choice(started)
            try:
                os.kill(status.pid, signal.SIGKILL)
            except ProcessLookupError:
                return None
            return f"'{status.label}' (index {status.index}"
        outcome.done.wait(0.005)
    assert outcome.done.is_set(), 'no node process started within 30s'
    raise AssertionError(f'the program ended before any node was killed: {outcome.error!r}')


def _stress_program() -> lp.Program:
    program = lp.Program('random_deaths')
    server = program.add_node(lp.CourierNode(Describe), label='server')
    program.add_node(lp.PyNode(call_until_stopped, server), label='caller')
    program.add_node(lp.CourierNode(Describe), label='other')
    return program


@pytest.mark.parametrize('seed', range(int(os.environ.get('LP_DEATH_TRIES', '3'))))
def test_random_node_killed_at_random_moment_never_hangs(seed):
    """SIGKILL of a random node at a random moment: launch or wait ends naming that node.

    LP_DEATH_TRIES=50 runs the long version.
    """
    rng = random.Random(seed)
    outcome = _Outcome(_stress_program(), wait=True)
    victim = _kill_random_node(rng, 1.5, outcome)
    started = time.monotonic()
    error = outcome.result(timeout=30)
    assert time.monotonic() - started < 5, "a death must end the launch (or wait) within seconds"
    assert isinstance(error, (lp.LaunchError, lp.NodeFailedError)), error
    if victim is not None:
        assert victim in str(error) and 'SIGKILL' in str(error), (victim, str(error))
