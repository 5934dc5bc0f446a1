"""Calls written for DeepMind Launchpad's API behave as they did there."""

from __future__ import annotations

import logging
import threading

import pytest

import launchpad_py as lp
from launchpad_py import courier


class Waiter:
    """Slow calls: slower than any timeout the tests set, and released when the test ends."""

    def __init__(self):
        self.release = threading.Event()

    def wait(self):
        return self.release.wait(30)

    def wait_for_program_stop(self):
        return lp.wait_for_stop(30)

    def ping(self):
        return 'pong'


class NoRun:
    """An object without run(), as PyClassNode targets sometimes are."""

    def __init__(self, path):
        with open(path, 'a') as marker:
            marker.write('built\n')


def test_courier_client_takes_call_timeout():
    """lp.CourierClient(address, call_timeout=...) bounds each call, as the original's does."""
    waiter = Waiter()
    with courier.Server(waiter) as server:
        client = lp.CourierClient(server.address, call_timeout=0.3)
        with pytest.raises(TimeoutError):
            client.wait()
        waiter.release.set()


def test_courier_client_takes_the_original_positional_parameters():
    """CourierClient(server_address, compress, call_timeout, wait_for_ready) binds by position."""
    waiter = Waiter()
    with courier.Server(waiter) as server:
        client = lp.CourierClient(server.address, True, 0.3, True)
        assert client.ping() == 'pong'
        with pytest.raises(TimeoutError):
            client.wait()
        waiter.release.set()


def test_courier_client_rejects_two_timeouts():
    """call_timeout and its alias timeout together are a TypeError naming both values."""
    with pytest.raises(TypeError, match='call_timeout=1.*timeout=2'):
        lp.CourierClient('127.0.0.1:1', call_timeout=1, timeout=2)


def test_courier_client_kwargs_reach_clients_from_handles():
    """courier_client_kwargs={'call_timeout': ...} applies to every dereferenced client."""
    program = lp.Program('client_kwargs')
    handle = program.add_node(
        lp.CourierNode(Waiter, courier_client_kwargs={'call_timeout': 0.3}), label='waiter')
    with lp.launch(program, launch_type='test_mt'):
        client = handle.dereference()
        assert client.ping() == 'pong'
        with pytest.raises(TimeoutError):
            client.wait_for_program_stop()


def test_unknown_courier_client_kwargs_are_rejected_with_the_node():
    """An option courier.Client does not take fails when the node is made, naming it."""
    with pytest.raises(ValueError, match=r"courier_client_kwargs=\{'deadline': 3\} of "
                                         r'CourierNode\(Waiter\)'):
        lp.CourierNode(Waiter, courier_client_kwargs={'deadline': 3})


def test_add_node_outside_a_group_needs_a_label():
    """Without a label or an enclosing group, add_node raises ValueError naming the node."""
    program = lp.Program('labels')
    with pytest.raises(ValueError, match=r"CourierNode\(Waiter\) added to program 'labels' "
                                         'without a label'):
        program.add_node(lp.CourierNode(Waiter))
    assert program.groups == {}


def test_add_node_inside_a_group_takes_the_group_label():
    """Inside `with program.group(...)` no label is needed."""
    program = lp.Program('labels')
    with program.group('waiters'):
        program.add_node(lp.CourierNode(Waiter))
    assert list(program.groups) == ['waiters']


@pytest.mark.parametrize('launch_type', ['test_mt', 'test_mp'])
def test_py_class_node_without_run_warns_and_ends(launch_type, tmp_path, caplog, capfd):
    """A PyClassNode whose object has no run() is built, warns once, and ends normally."""
    marker = tmp_path / 'built'
    program = lp.Program('no_run')
    program.add_node(lp.PyClassNode(NoRun, str(marker)), label='norun')
    with caplog.at_level(logging.WARNING):
        lp.launch(program, launch_type=launch_type).wait(timeout=60)
    messages = caplog.text + capfd.readouterr().out
    assert messages.count('NoRun built by PyClassNode \'norun\' has no run() method') == 1
    assert marker.read_text() == 'built\n'
