"""controller.statistics(): live per-node state and counters, checked against known traffic."""

from __future__ import annotations

import os
import signal
import time

import pytest

import launchpad_py as lp
from launchpad_py import courier
from tests.conftest import launch as conftest_launch
from tests.conftest import host_name, needs_ssh_hosts, wait_for
from tests.observe_nodes import Bomb, Counted

LAUNCH_TYPES = ['local_mt', 'local_mp']


def _program():
    program = lp.Program('observed')
    handle = program.add_node(lp.CourierNode(Counted), label='server')
    return program, handle


def _node(controller, name):
    return next(n for n in controller.statistics() if n.name == name)


@pytest.mark.parametrize('launch_type', LAUNCH_TYPES)
def test_n_calls_are_counted_per_method(launch_type):
    """137 echo calls and 3 failing calls read back as exactly those counts."""
    program, handle = _program()
    with lp.launch(program, launch_type=launch_type) as controller:
        client = handle.dereference()
        for i in range(137):
            client.echo(i)
        for i in range(3):
            with pytest.raises(KeyError):
                client.fail('no')
        node = _node(controller, 'server/0')
    methods = {m.name: m for m in node.methods}
    assert (methods['echo'].calls, methods['echo'].errors) == (137, 0)
    assert (methods['fail'].calls, methods['fail'].errors) == (3, 3)
    assert node.calls == 140 and node.in_flight == 0


@pytest.mark.parametrize('launch_type', LAUNCH_TYPES)
def test_node_identity_and_resources_are_reported(launch_type):
    """State, host, pid, uptime and RSS come with the counters."""
    program, handle = _program()
    with lp.launch(program, launch_type=launch_type) as controller:
        handle.dereference().echo(0)
        node = _node(controller, 'server/0')
    assert node.state == lp.NodeState.RUNNING and node.host == 'localhost'
    assert node.pid and node.uptime_s > 0 and node.restarts == 0
    assert node.rss_bytes > 10 * 2**20
    assert node.shared_process == (launch_type == 'local_mt')


def test_bytes_in_and_out_grow_with_payload():
    """A 1 MB argument returned unchanged counts at least 1 MB in and 1 MB out."""
    program, handle = _program()
    with lp.launch(program, launch_type='local_mp') as controller:
        handle.dereference().echo(b'x' * 1_000_000)
        node = _node(controller, 'server/0')
    assert node.bytes_in >= 1_000_000 and node.bytes_out >= 1_000_000


def test_calls_in_flight_are_counted():
    """Three calls blocked in the server read as three in flight, then none."""
    program, handle = _program()
    with lp.launch(program, launch_type='local_mp') as controller:
        client = handle.dereference()
        futures = [client.futures.hold() for _ in range(3)]
        assert client.held(3, 30)
        assert _node(controller, 'server/0').in_flight == 3
        client.release()
        for future in futures:
            future.result(timeout=30)
        assert _node(controller, 'server/0').in_flight == 0


def test_latency_mean_and_p99_reflect_slow_calls():
    """Calls taking 20 ms report a mean and p99 of at least 20 ms, and below a second."""
    program, handle = _program()
    with lp.launch(program, launch_type='local_mp') as controller:
        client = handle.dereference()
        for _ in range(5):
            client.slow(0.02)
        slow = next(m for m in _node(controller, 'server/0').methods if m.name == 'slow')
    assert 0.02 <= slow.mean_s < 1 and 0.02 <= slow.p99_s < 1


def test_failed_node_reports_last_error_and_traceback():
    """A node that raises shows state failed, its error and traceback, in statistics."""
    program = lp.Program('failing')
    bomb = program.add_node(lp.CourierNode(Bomb), label='bomb')
    controller = lp.launch(program, launch_type='local_mp')
    bomb.dereference().futures.arm()  # Its reply may never come: the node dies.
    with pytest.raises(lp.NodeFailedError):
        controller.wait(timeout=60)
    node = _node(controller, 'bomb/0')
    assert node.state == lp.NodeState.FAILED
    assert 'the bomb went off' in node.last_error
    assert 'RuntimeError' in node.traceback


def test_calls_per_second_is_the_rate_between_samples():
    """200 calls between two samples read as 200 over the time between them."""
    program, handle = _program()
    with lp.launch(program, launch_type='local_mp') as controller:
        client = handle.dereference()
        a0 = time.time()
        controller.statistics()
        a1 = time.time()
        for i in range(200):
            client.echo(i)
        b0 = time.time()
        node = _node(controller, 'server/0')
        b1 = time.time()
    assert 200 / (b1 - a0) <= node.calls_per_s <= 200 / (b0 - a1)


def test_a_restarted_node_counts_afresh_and_no_rate_goes_negative():
    """After a restart the counters are the new process's, and its rate is taken from its
    start, not against its predecessor's larger count."""
    program, handle = _program()
    policy = {'server': lp.Restart(max_restarts=2, backoff=(0.05, 0.1))}
    with lp.launch(program, launch_type='local_mp', failure_policy=policy) as controller:
        client = handle.dereference()
        for i in range(50):
            client.echo(i)
        before = _node(controller, 'server/0')
        os.kill(before.pid, signal.SIGKILL)
        wait_for(lambda: _node(controller, 'server/0').state == lp.NodeState.RUNNING
                 and _node(controller, 'server/0').restarts == 1, what='the restart')
        client.echo(0)
        after = _node(controller, 'server/0')
    assert (before.calls, after.calls, after.restarts) == (50, 1, 1) and after.pid != before.pid
    assert after.calls_per_s > 0


@pytest.mark.parametrize('transport', ['auto', 'tcp', 'grpc'])
def test_server_counts_calls_on_every_transport(transport):
    """Every path to a courier server (same-host socket, raw TCP, gRPC) is counted."""
    with courier.Server(Counted()) as server:
        client = courier.Client(server.address, transport=transport)
        for i in range(25):
            client.echo(i)
        snapshot = server.stats.snapshot()
    assert snapshot['methods']['echo']['calls'] == 25
    assert snapshot['bytes_out'] > 0 and snapshot['in_flight'] == 0


@needs_ssh_hosts
def test_ssh_nodes_report_counters_and_host():
    """Under the ssh launcher, a node on another host reports its calls over the same channel."""
    program, handle = _program()
    with conftest_launch(program, 'ssh') as controller:
        client = handle.dereference()
        for i in range(23):
            client.echo(i)
        node = _node(controller, 'server/0')
    assert node.host == host_name('h1') and node.calls == 23 and node.rss_bytes > 0
