"""Behaviour every launcher must share, run against each launcher that runs here."""

from __future__ import annotations

import concurrent.futures
import os

import numpy as np
import pytest

import launchpad_py as lp
from launchpad_py import courier
from conftest import (ALL_LAUNCH_TYPES, launch, leaves_nothing_running, ray_address,
                      read_on_host, wait_for)
from nodes_for_tests import (Pinger, crash, record_stop_handler_calls, serve_forever,
                             stop_from_side_thread)

# Module scope: the tests of one launcher run together, so those that only call a node can
# share one program (``pinger``) instead of launching their own.
pytestmark = pytest.mark.parametrize('launch_type', ALL_LAUNCH_TYPES, scope='module')


@pytest.fixture(scope='module', autouse=True)
def cluster_for_launcher(request, launch_type):
    """Kubernetes runs against a fake cluster of its own, one per launcher's tests here (see
    fake_kube); ray on the test Ray cluster, or skips saying why."""
    if launch_type == 'kubernetes':
        request.getfixturevalue('module_kubernetes_cluster')
    if launch_type == 'ray':
        ray_address()


def _pinger_program():
    program = lp.Program('conformance')
    handle = program.add_node(lp.CourierNode(Pinger), label='pinger')
    return program, handle


# Under these the node's threads live in this process, and each test counts the threads it
# leaves (conftest.no_leaks): a shared node's lazily started handler threads would be counted.
_IN_THIS_PROCESS = ('local_mt', 'test_mt')


@pytest.fixture(scope='module')
def _shared_pinger(launch_type):
    """A client of one pinger node, launched once per launcher that runs nodes in processes
    of their own; the program stops, leaving nothing running, after the last test using it."""
    if launch_type in _IN_THIS_PROCESS:
        yield None
        return
    program, handle = _pinger_program()
    with leaves_nothing_running():
        with launch(program, launch_type):
            yield handle.dereference()


@pytest.fixture
def pinger(_shared_pinger, launch_type):
    """A client of a pinger node, for the tests that only call it: the launcher's shared one,
    or (threads in this process) one of a program launched for this test alone."""
    if _shared_pinger is not None:
        yield _shared_pinger
        return
    program, handle = _pinger_program()
    with launch(program, launch_type):
        yield handle.dereference()


def test_ping_courier_node(pinger):
    """A courier node answers calls from the launching process."""
    assert pinger.ping(7) == ('pong', 7)


def test_futures_from_many_threads(pinger):
    """Futures issued concurrently from 8 threads each get their own answer."""
    def issue(thread_index):
        futures = [pinger.futures.ping((thread_index, i)) for i in range(20)]
        return [f.result(timeout=30) for f in futures]

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(issue, range(8)))
    for thread_index, answers in enumerate(results):
        assert answers == [('pong', (thread_index, i)) for i in range(20)]


def test_numpy_arrays_both_ways(pinger):
    """Arrays go to the node and come back intact."""
    sent = np.random.default_rng(0).normal(size=(64, 3))
    np.testing.assert_array_equal(pinger.double(sent), sent * 2)
    received = pinger.make_array(1000)
    assert received.dtype == np.float32
    np.testing.assert_array_equal(received, np.arange(1000, dtype=np.float32))


def test_remote_exception_keeps_type_message_and_traceback(pinger):
    """A server-side exception is re-raised as its own type with the remote traceback."""
    with pytest.raises(KeyError, match='no such key') as info:
        pinger.fail('no such key')
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
