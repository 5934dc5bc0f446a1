"""Stopping programs: calls to nodes already gone fail fast; calls to live ones are kept."""

from __future__ import annotations

import time

import pytest

import launchpad_py as lp
from conftest import wait_for
from stop_nodes import Finishes, Worker, call_after_go, call_in_stop_handler

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
