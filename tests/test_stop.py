"""Stopping programs: it always ends in time; calls to gone nodes fail fast, to live ones not."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time

import pytest

import launchpad_py as lp
from conftest import REPO, wait_for
from stop_nodes import (Finishes, Worker, call_after_go, call_in_stop_handler,
                        ignore_the_stop_until)

SCRIPTS = os.path.join(REPO, 'tests', 'scripts')

LOCAL = ['local_mt', 'local_mp']
TRANSPORTS = ['auto', 'grpc']


@pytest.mark.parametrize('transport', TRANSPORTS)
@pytest.mark.parametrize('launch_type', LOCAL)
def test_calls_to_a_stopped_node_fail_fast_once_the_program_stops(launch_type, transport,
                                                                   tmp_path):
    """A call waiting for a node that is gone, and the next one, raise within 1 s of the stop."""
    go, log = tmp_path / 'go', tmp_path / 'log'
    program = lp.Program('fail_fast')
    gone = program.add_node(lp.CourierNode(
        Finishes, courier_client_kwargs={'transport': transport}), label='gone')
    program.add_node(lp.PyNode(call_after_go, gone, str(go), str(log)), label='caller')
    controller = lp.launch(program, launch_type=launch_type)
    wait_for(lambda: controller.statuses()[0].state == lp.NodeState.FINISHED, what='gone ends')
    go.write_text('')
    wait_for(log.exists, what='the caller calling the gone node')  # Its call now waits.
    stopped_at = time.time()
    controller.stop(grace=5)
    lines = log.read_text().splitlines()[1:]
    assert [line.split()[:2] for line in lines] == [
        ['first', 'CourierUnavailableError'], ['second', 'CourierUnavailableError']], lines
    first_end = float(lines[0].split()[3])
    second_start, second_end = map(float, lines[1].split()[2:])
    assert first_end - stopped_at <= 1.0
    assert second_end - second_start <= 1.0


@pytest.mark.parametrize('transport', TRANSPORTS)
@pytest.mark.parametrize('launch_type', LOCAL)
def test_stop_handlers_calls_to_live_nodes_are_answered(launch_type, transport, tmp_path):
    """A stop handler's call to a node that is still up gets its answer, not a fast failure."""
    log = tmp_path / 'log'
    program = lp.Program('handler_calls')
    worker = program.add_node(lp.CourierNode(
        Worker, courier_client_kwargs={'transport': transport}), label='worker')
    program.add_node(lp.PyNode(call_in_stop_handler, worker, str(log)), label='caller')
    controller = lp.launch(program, launch_type=launch_type)
    controller.stop(grace=10)
    controller.wait()
    assert log.read_text().splitlines() == ['handler done']


GRACE = 2


def _run_stuck_script(mode: str) -> tuple[subprocess.CompletedProcess, float]:
    """Runs scripts/stuck_local_mt.py; returns its result and seconds from stop to exit."""
    result = subprocess.run(
        [sys.executable, os.path.join(SCRIPTS, 'stuck_local_mt.py'), mode,
         f'--lp_termination_notice_secs={GRACE}'],
        capture_output=True, text=True, timeout=60, cwd=REPO)
    ended = time.time()
    stopped = [float(line.split()[-1]) for line in result.stdout.splitlines()
               if 'stop requested at' in line]  # After the node's [label/index].
    assert stopped, f'the program was never stopped:\n{result.stdout}\n{result.stderr}'
    return result, ended - stopped[0]


@pytest.mark.parametrize('mode', ['wait', 'return'])
def test_local_mt_ends_the_process_when_a_node_ignores_the_stop(mode):
    """Waiting on the program or not, the script exits 137 within grace + 1 s, naming the node."""
    result, seconds = _run_stuck_script(mode)
    assert result.returncode == 137, result.stderr
    assert seconds <= GRACE + 1
    assert "program 'stuck': stubborn/0 did not end within the 2s grace period" in result.stderr
    assert 'in ignore_the_stop' in result.stderr  # Its Python stack.
    assert 'wait returned' not in result.stdout


def test_local_mt_names_a_blocking_stop_handler_with_its_stack():
    """A stop handler that never returns is shown with the nodes that wait for it."""
    result, seconds = _run_stuck_script('handler')
    assert result.returncode == 137, result.stderr
    assert seconds <= GRACE + 1
    assert 'stubborn/0, the stop handlers did not end' in result.stderr
    assert 'in block_in_a_stop_handler' in result.stderr
    assert 'in <lambda>' in result.stderr


def test_local_mt_removed_node_left_running_does_not_hold_up_the_stop_or_the_exit():
    """A node removed from its elastic group that ignores its stop is left running in its
    thread (threads cannot be killed); the program still stops and the script exits 0, and
    the program's end names the thread it left."""
    result = subprocess.run(
        [sys.executable, os.path.join(SCRIPTS, 'stuck_local_mt.py'), 'removed'],
        capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-2:] == ['removed', 'stopped'], result.stdout
    assert 'node stubborn/0 did not return within the grace period' in result.stderr
    assert ("program 'stuck' ended, but the threads of nodes removed earlier still run"
            in result.stderr), result.stderr
    assert 'stubborn/0 (thread lp-node-stubborn/0)' in result.stderr


def _readline_within(stream, seconds: float) -> str:
    """The next line of ``stream``; fails the test if none comes within ``seconds``."""
    ready, _, _ = select.select([stream], [], [], seconds)
    assert ready, f'no output within {seconds}s'
    return stream.readline()


@pytest.mark.parametrize('mode', ['ctrl_c', 'ctrl_c_masked'])
def test_second_ctrl_c_ends_a_stuck_local_mt_program_at_once(mode):
    """The first Ctrl-C starts a graceful stop; the second one ends the process without grace.

    In 'ctrl_c_masked' the main thread blocks SIGINT, so both signals land on other
    threads and never wake the main thread's wait: the handlers must run anyway.
    """
    launcher = subprocess.Popen(
        [sys.executable, os.path.join(SCRIPTS, 'stuck_local_mt.py'), mode,
         '--lp_termination_notice_secs=60'],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert _readline_within(launcher.stdout, 60) == 'launched\n'
        launcher.send_signal(signal.SIGINT)
        while 'press again to kill it' not in _readline_within(launcher.stderr, 10):
            pass
        second = time.monotonic()
        launcher.send_signal(signal.SIGINT)
        _, err = launcher.communicate(timeout=30)
    finally:
        launcher.kill()
        launcher.wait()
    assert launcher.returncode == 137, err
    assert time.monotonic() - second <= 1 + 1  # Process exit included.
    assert 'stubborn/0 did not end within the 0s grace period' in err


def test_local_mt_acme_like_program_exits_zero_after_its_step_limit():
    """An actor blocked (on an executor thread) in a call to the stopped learner ends the stop."""
    result, seconds = _run_stuck_script('acme')
    assert result.returncode == 0, result.stderr
    assert seconds <= GRACE + 1
    assert 'wait returned' in result.stdout


def _stubborn_test_mt(name: str) -> tuple[threading.Event, lp.ProgramController]:
    """A test_mt program whose one node ignores the stop until the event is set."""
    release = threading.Event()
    program = lp.Program(name)
    program.add_node(lp.PyNode(ignore_the_stop_until, release), label='stubborn')
    return release, lp.launch(program, launch_type='test_mt', serialize_py_nodes=False)


def test_test_mt_raises_instead_of_ending_the_test_runner():
    """Under test_mt, stop() and wait() raise StuckNodesError naming the node, with its stack."""
    release, controller = _stubborn_test_mt('stuck_test')
    try:
        started = time.monotonic()
        with pytest.raises(lp.StuckNodesError, match='stubborn/0 did not end') as raised:
            controller.stop(grace=1)
        assert time.monotonic() - started <= 1 + 1
        assert raised.value.nodes == ['stubborn/0']
        assert 'in ignore_the_stop_until' in str(raised.value)
        with pytest.raises(lp.StuckNodesError):
            controller.wait()
    finally:
        release.set()


def test_is_stopping_from_the_stop_request_until_the_end():
    """is_stopping is False while the program runs, True once a stop began, nodes still running."""
    release, controller = _stubborn_test_mt('stopping')
    try:
        assert controller.is_running and not controller.is_stopping
        controller.request_stop(grace=60)
        wait_for(lambda: controller.is_stopping, what='the supervisor to begin the stop')
        assert controller.is_running
    finally:
        release.set()
    controller.wait(timeout=30)
    assert controller.is_stopping and not controller.is_running
