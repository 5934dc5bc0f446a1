"""Node behaviour at execution time: handles to clients, run(), options, scoping."""

from __future__ import annotations

import inspect

import pytest

import launchpad_py as lp
from conftest import LAUNCH_TYPES
from nodes_for_tests import Greeter, Pinger, WithRun, serve_forever, stop_program


def _program_with_run_node(disable_run: bool):
    program = lp.Program('runs')
    pinger = program.add_node(lp.CourierNode(Pinger), label='pinger')
    node = lp.CourierNode(WithRun, {'list': [pinger], 'tuple': ((pinger,),)}, timeout=7,
                          courier_client_kwargs={'timeout': 30})
    if disable_run:
        node.disable_run()
    return program, program.add_node(node, label='runner')


@pytest.mark.parametrize('launch_type', LAUNCH_TYPES)
def test_nested_handles_become_clients_and_run_is_called(launch_type):
    """Handles deep in arguments are clients in the node; run() is called."""
    program, runner = _program_with_run_node(disable_run=False)
    with lp.launch(program, launch_type=launch_type):
        client = runner.dereference()
        assert client.peer_answers() == [('pong', 'a'), ('pong', 'b')]
        assert client.did_run() is True


def test_disable_run_serves_without_calling_run():
    """disable_run() keeps the server but never calls run()."""
    program, runner = _program_with_run_node(disable_run=True)
    with lp.launch(program, launch_type='test_mt'):
        assert runner.dereference().did_run() is False


def test_user_keyword_named_like_an_option_reaches_the_constructor():
    """A constructor argument called 'timeout' is the user's, not a node option."""
    program, runner = _program_with_run_node(disable_run=True)
    with lp.launch(program, launch_type='test_mt'):
        assert runner.dereference().timeout_seen() == 7


def test_disabled_py_node_does_not_call_its_function():
    """A PyNode whose run is disabled finishes without calling the function."""
    program = lp.Program('disabled')
    node = lp.PyNode(stop_program)
    node.disable_run()
    program.add_node(node, label='would_stop')
    program.add_node(lp.CourierNode(Greeter), label='greeter')
    controller = lp.launch(program, launch_type='test_mt')
    with pytest.raises(TimeoutError):
        controller.wait(timeout=0.5)
    states = {s.label: s.state for s in controller.statuses()}
    assert states['would_stop'] == lp.NodeState.FINISHED
    controller.stop()


def test_stop_is_scoped_to_one_program():
    """lp.stop() inside one program leaves another program in the same process running."""
    survivor = lp.Program('survivor')
    survivor.add_node(lp.PyNode(serve_forever), label='waiter')
    stopping = lp.Program('stopping')
    stopping.add_node(lp.PyNode(stop_program), label='stopper')
    stopping.add_node(lp.PyNode(serve_forever), label='waiter')
    first = lp.launch(survivor, launch_type='test_mt')
    second = lp.launch(stopping, launch_type='test_mt')
    second.wait(timeout=30)
    assert first.is_running
    first.stop()
    assert not first.is_running


class _LookupProbe:
    """Says whether its methods were looked up through the node's construction stand-in."""

    def __getattribute__(self, name):
        if name == 'looked_up_via_stand_in':
            via = any(frame.function == '__getattr__' and frame.filename.endswith('courier_node.py')
                      for frame in inspect.stack(context=0))
            return lambda: via
        return object.__getattribute__(self, name)


def test_calls_resolve_on_the_built_object_not_the_stand_in():
    """Once a node's object is built, its server looks methods up on it directly (issue 29)."""
    program = lp.Program('lookup')
    node = program.add_node(lp.CourierNode(_LookupProbe), label='probe')
    with lp.launch(program, launch_type='test_mt'):
        client = node.dereference()
        client.looked_up_via_stand_in()  # The first may wait for the constructor.
        assert client.looked_up_via_stand_in() is False
