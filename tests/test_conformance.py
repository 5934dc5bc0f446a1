"""Behaviour every launcher must share, run against each launcher that runs here."""

from __future__ import annotations

import concurrent.futures
import os

import numpy as np
import pytest

import launchpad_py as lp
from launchpad_py import courier
from conftest import ALL_LAUNCH_TYPES, launch, read_on_host, wait_for
from nodes_for_tests import (Pinger, crash, record_stop_handler_calls, serve_forever,
                             stop_from_side_thread)

pytestmark = pytest.mark.parametrize('launch_type', ALL_LAUNCH_TYPES)


@pytest.fixture(autouse=True)
def cluster_for_kubernetes(request, launch_type):
    """Kubernetes runs against a fake cluster of its own per test (see fake_kube); ray on the
    test Ray cluster, or skips saying why."""
    if launch_type == 'kubernetes':
        request.getfixturevalue('kubernetes_cluster')
    if launch_type == 'ray':
        request.getfixturevalue('ray_cluster')


def _pinger_program():
    program = lp.Program('conformance')
    handle = program.add_node(lp.CourierNode(Pinger), label='pinger')
    return program, handle


def test_ping_courier_node(launch_type):
    """A courier node answers calls from the launching process."""
    program, handle = _pinger_program()
    with launch(program, launch_type):
        assert handle.dereference().ping(7) == ('pong', 7)


def test_futures_from_many_threads(launch_type):
    """Futures issued concurrently from 8 threads each get their own answer."""
    program, handle = _pinger_program()
    with launch(program, launch_type):
        client = handle.dereference()

        def issue(thread_index):
            futures = [client.futures.ping((thread_index, i)) for i in range(20)]
            return [f.result(timeout=30) for f in futures]

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            results = list(pool.map(issue, range(8)))
    for thread_index, answers in enumerate(results):
        assert answers == [('pong', (thread_index, i)) for i in range(20)]


def test_numpy_arrays_both_ways(launch_type):
    """Arrays go to the node and come back intact."""
    program, handle = _pinger_program()
    with launch(program, launch_type):
        client = handle.dereference()
        sent = np.random.default_rng(0).normal(size=(64, 3))
        np.testing.assert_array_equal(client.double(sent), sent * 2)
        received = client.make_array(1000)
        assert received.dtype == np.float32
        np.testing.assert_array_equal(received, np.arange(1000, dtype=np.float32))


def test_remote_exception_keeps_type_message_and_traceback(launch_type):
    """A server-side exception is re-raised as its own type with the remote traceback."""
    program, handle = _pinger_program()
    with launch(program, launch_type):
        with pytest.raises(KeyError, match='no such key') as info:
            handle.dereference().fail('no such key')
    assert isinstance(info.value.__cause__, courier.RemoteTraceback)
    assert 'in fail' in info.value.remote_traceback
    assert any("'pinger/0'" in note and "'fail'" in note for note in info.value.__notes__)


def test_stop_from_a_side_thread_of_a_node(launch_type):
    """lp.stop() called from a thread the node started stops the whole program."""
    program, _ = _pinger_program()
    program.add_node(lp.PyNode(stop_from_side_thread), label='stopper')
    controller = launch(program, launch_type)
    controller.wait(timeout=60)
    assert not controller.is_running
    assert {s.label: s.state for s in controller.statuses()}['pinger'] == lp.NodeState.STOPPED


def test_crashing_node_propagates(launch_type):
    """A node that raises stops the program and wait() re-raises it with its label."""
    program, _ = _pinger_program()
    program.add_node(lp.PyNode(crash, 'boom in node'), label='crasher')
    controller = launch(program, launch_type)
    with pytest.raises(lp.NodeFailedError, match='crasher') as info:
        controller.wait(timeout=60)
    assert isinstance(info.value.__cause__, ValueError)
    assert 'boom in node' in info.value.remote_traceback
    states = {s.label: s.state for s in controller.statuses()}
    assert states == {'pinger': lp.NodeState.STOPPED, 'crasher': lp.NodeState.FAILED}


def test_stop_handlers_run_once_in_order(launch_type, tmp_path):
    """Stop handlers registered in a node run exactly once, in registration order."""
    path = str(tmp_path / 'handlers.txt')
    program = lp.Program('handlers')
    program.add_node(lp.PyNode(record_stop_handler_calls, path), label='recorder')
    program.add_node(lp.PyNode(serve_forever), label='other')
    controller = launch(program, launch_type)
    # Read where the node ran: here, or over ssh on a host that shares nothing with us.
    host = next(s.host for s in controller.statuses() if s.label == 'recorder') or 'here'

    def registered() -> bool:
        try:
            return read_on_host(host, path + '.registered') == 'yes'
        except FileNotFoundError:
            return False

    wait_for(registered, what='handler registration')
    controller.stop()
    controller.stop()  # A second stop changes nothing.
    assert read_on_host(host, path).splitlines() == ['first', 'second']


def test_statistics_count_calls(launch_type):
    """controller.statistics() counts the calls a node served, under every launcher."""
    program, handle = _pinger_program()
    with launch(program, launch_type) as controller:
        client = handle.dereference()
        for i in range(17):
            client.ping(i)
        (node,) = controller.statistics()
    assert node.name == 'pinger/0' and node.state == lp.NodeState.RUNNING
    assert {m.name: m.calls for m in node.methods} == {'ping': 17}
