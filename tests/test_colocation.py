"""Colocation: nodes of any type sharing one process (threads) or one supervisor (processes)."""

from __future__ import annotations

import concurrent.futures
import os
import signal

import portpicker
import psutil
import pytest

import launchpad_py as lp
from nodes_for_node_types import (ContextReporter, CountingUpstream, count_runs, crash_until,
                                  return_at_once, stop_after_calling, stop_after_runs)
from nodes_for_tests import Pinger, crash, serve_forever, stop_from_side_thread
from restart_nodes import AddressCaller
from conftest import wait_for

KINDS = {'threads': lp.MultiThreadingColocation, 'processes': lp.MultiProcessingColocation}
BOTH = pytest.mark.parametrize('kind', sorted(KINDS))
LAUNCHERS = pytest.mark.parametrize('launch_type', ['test_mt', 'test_mp'])


def _colocate(kind, nodes, label='together', **options):
    program = lp.Program(f'colocation-{kind}')
    program.add_node(KINDS[kind](nodes, **options), label=label)
    return program


@BOTH
@LAUNCHERS
def test_colocated_nodes_keep_their_own_handles(kind, launch_type):
    """A courier node and a cacher of it, colocated, each answer on their own address."""
    upstream_node = lp.CourierNode(CountingUpstream)
    upstream = upstream_node.create_handle()
    cacher_node = lp.CacherNode(upstream, refresh_interval_ms=60_000, stale_after_ms=60_000)
    reporter_node = lp.CourierNode(ContextReporter)
    program = _colocate(kind, [upstream_node, cacher_node, reporter_node])
    with lp.launch(program, launch_type=launch_type):
        cached = cacher_node.create_handle().dereference()
        assert cached.value('a')[0] == cached.value('a')[0] == 1
        assert upstream.dereference().calls('a') == 1
        assert reporter_node.create_handle().dereference().context() == ('together', 0)


@BOTH
def test_colocated_nodes_share_a_process_only_as_threads(kind):
    """Threads share the node's process; processes get one each."""
    first, second = lp.CourierNode(ContextReporter), lp.CourierNode(ContextReporter)
    program = _colocate(kind, [first, second])
    with lp.launch(program, launch_type='test_mp'):
        pids = {node.create_handle().dereference().pid() for node in (first, second)}
    assert len(pids) == (1 if kind == 'threads' else 2)


@BOTH
@LAUNCHERS
def test_failure_of_one_colocated_node_fails_the_program(kind, launch_type):
    """A colocated node that raises ends the program; wait() names the node and the error."""
    program = _colocate(kind, [lp.CourierNode(Pinger), lp.PyNode(crash, 'boom in colocation')])
    # The crash may come before or after the colocation reports ready.
    with pytest.raises((lp.LaunchError, lp.NodeFailedError), match="'together'") as info:
        lp.launch(program, launch_type=launch_type).wait(timeout=60)
    assert 'ValueError: boom in colocation' in str(info.value)


@BOTH
@LAUNCHERS
def test_stop_from_inside_a_colocated_node_stops_the_program(kind, launch_type):
    """lp.stop() in one colocated node (from a side thread) stops the whole program."""
    program = _colocate(kind, [lp.CourierNode(Pinger), lp.PyNode(stop_from_side_thread)])
    program.add_node(lp.PyNode(serve_forever), label='elsewhere')
    controller = lp.launch(program, launch_type=launch_type)
    controller.wait(timeout=60)
    assert {s.label: s.state for s in controller.statuses()}['elsewhere'] == lp.NodeState.STOPPED


@BOTH
def test_colocated_node_calls_its_sibling(kind):
    """A colocated node reaches its sibling through the sibling's handle."""
    pinger_node = lp.CourierNode(Pinger)
    program = _colocate(kind, [pinger_node, lp.PyNode(stop_after_calling, pinger_node.create_handle())])
    lp.launch(program, launch_type='test_mp').wait(timeout=60)


def test_failed_child_is_restarted_up_to_the_retry_count(tmp_path):
    """Each child has its own retry counter: two children failing once each both recover."""
    paths = [str(tmp_path / 'first'), str(tmp_path / 'second')]
    nodes = [lp.PyNode(crash_until, path, 1) for path in paths] + [lp.PyNode(stop_after_runs, paths, 2)]
    program = _colocate('processes', nodes, num_retries_on_failure=1)
    lp.launch(program, launch_type='test_mp').wait(timeout=60)
    assert [count_runs(path) for path in paths] == [2, 2]


def test_child_failing_past_the_retry_count_fails_the_program(tmp_path):
    """One failure more than the retries fails the colocation, after the restarts."""
    path = str(tmp_path / 'runs')
    program = _colocate('processes', [lp.PyNode(crash_until, path, 3)], num_retries_on_failure=2)
    controller = lp.launch(program, launch_type='test_mp')
    with pytest.raises(lp.NodeFailedError, match='after 2 restarts') as info:
        controller.wait(timeout=60)
    assert 'planned failure 3 of 3' in info.value.remote_traceback
    assert count_runs(path) == 3


def test_children_die_with_their_supervisor():
    """Killing the supervisor process leaves no colocated child behind."""
    program = _colocate('processes', [lp.CourierNode(ContextReporter), lp.PyNode(serve_forever)])
    controller = lp.launch(program, launch_type='test_mp')
    supervisor = psutil.Process(controller.statuses()[0].pid)
    children = supervisor.children()
    assert len(children) == 2
    os.kill(supervisor.pid, signal.SIGKILL)
    _, alive = psutil.wait_procs(children, timeout=30)
    assert not alive
    with pytest.raises(lp.NodeFailedError, match='SIGKILL'):
        controller.wait(timeout=60)


def test_return_on_first_completed_ends_the_colocation():
    """With return_on_first_completed, the first child to return ends the colocation."""
    program = _colocate('threads', [lp.PyNode(serve_forever), lp.PyNode(return_at_once)],
                        return_on_first_completed=True)
    controller = lp.launch(program, launch_type='test_mt')
    controller.wait(timeout=60)
    assert controller.statuses()[0].state == lp.NodeState.FINISHED


def test_colocation_node_picks_the_kind_by_mode():
    """lp.ColocationNode(mode=...) builds the matching colocation, and refuses other modes."""
    assert isinstance(lp.ColocationNode([lp.PyNode(serve_forever)]), lp.MultiThreadingColocation)
    assert isinstance(lp.ColocationNode([lp.PyNode(serve_forever)], mode='processes',
                                        num_retries_on_failure=1), lp.MultiProcessingColocation)
    with pytest.raises(ValueError, match="'fibers'"):
        lp.ColocationNode([lp.PyNode(serve_forever)], mode='fibers')


def test_a_node_already_in_the_program_cannot_be_colocated():
    """Colocating a node that was added to the program is refused with the fix."""
    program = lp.Program('twice')
    node = lp.PyNode(serve_forever)
    program.add_node(node, label='alone')
    with pytest.raises(lp.ProgramError, match='create_handle'):
        lp.MultiThreadingColocation([node])
    with pytest.raises(lp.ProgramError, match='non-empty list of nodes'):
        lp.MultiProcessingColocation([])


def test_a_childs_calls_to_an_address_a_peer_moved_from_fail_at_once():
    """A peer restarted as a new pod serves at a new IP; the launcher tells every node's
    process ('moved', Kubernetes: ``remote/setup.py``) so that calls waiting at the old one
    fail and ask where it went. A child of a MultiProcessingColocation must hear it too, and
    so must a child restarted after it: before, only the parent did, and the child's call
    waited at the old address for ever. (Sent here as that launcher sends it: local_mp
    never moves a node.)"""
    moved_from = f'127.0.0.1:{portpicker.pick_unused_port()}'  # Nothing listens there.
    node = lp.CourierNode(AddressCaller)
    handle = node.create_handle()
    program = _colocate('processes', [node], num_retries_on_failure=1)
    with lp.launch(program, launch_type='test_mp') as controller:
        caller = handle.dereference()
        waiting = caller.futures.ping_at(moved_from)
        with pytest.raises(concurrent.futures.TimeoutError):
            waiting.result(timeout=0.5)  # It waits for a server to come there.
        (supervisor,) = controller._workers
        supervisor._channel.send('moved', [moved_from])
        outcomes = [waiting.result(timeout=30)]
        child = caller.pid()
        os.kill(child, signal.SIGKILL)  # Its restart must learn the move too.
        wait_for(lambda: _pid_once_served(caller) not in (None, child), what='the restart')
        outcomes.append(caller.futures.ping_at(moved_from).result(timeout=30))
    for outcome in outcomes:
        assert outcome.get('unavailable') and moved_from in outcome['message'], outcome
        assert outcome['seconds'] < 10, outcome


def _pid_once_served(caller) -> int | None:
    """The child's process id; None while it restarts (its server not there yet)."""
    try:
        return caller.pid()
    except lp.courier.CourierUnavailableError:
        return None
