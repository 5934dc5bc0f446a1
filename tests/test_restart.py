"""Failure policies per group: lp.Restart brings a failed node back at its address."""

from __future__ import annotations

import logging
import os
import random
import signal
import time

import psutil
import pytest

import launchpad_py as lp
from launchpad_py import courier
from launchpad_py.program import failure_policy
from launchpad_py.launchers import registry
from launchpad_py.supervision.controller import ProgramController
from launchpad_py.launchers.local.threads import ThreadWorker
from conftest import host_name, needs_ssh_hosts, ssh_host, wait_for
from restart_nodes import Member, always_crash, crash_first_times

_QUICK = lp.Restart(max_restarts=3, backoff=(0.05, 0.2))


def _member_program(name='restarts'):
    program = lp.Program(name)
    handle = program.add_node(lp.CourierNode(Member), label='member')
    return program, handle


def _state(controller, label='member'):
    return next(s for s in controller.statuses() if s.label == label)


def _kill_and_wait_back(controller, client):
    """SIGKILLs the node behind ``client``; returns its new pid once it serves again."""
    old = client.who()['pid']
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: _state(controller).restarts == 1, what='the restart')
    return old, client.who()['pid']


def test_killed_node_comes_back_at_its_address_with_its_restart_counted(caplog):
    """SIGKILL of a Restart node: same address, new pid, restarts=1 in statuses and the log."""
    program, handle = _member_program()
    caplog.set_level(logging.WARNING, logger='launchpad_py.supervision.controller')
    with lp.launch(program, launch_type='test_mp', failure_policy={'member': _QUICK}) as controller:
        client = handle.dereference()
        address = handle.address.resolve()
        old, new = _kill_and_wait_back(controller, client)
        assert new != old and handle.address.resolve() == address
        # It may serve a call before the launcher has read its 'ready'.
        wait_for(lambda: _state(controller).state == lp.NodeState.RUNNING, what='running again')
        status = _state(controller)
        assert (status.state, status.pid, status.restarts) == (lp.NodeState.RUNNING, new, 1)
        assert controller.is_running
    messages = [r.getMessage() for r in caplog.records]
    assert any('member/0' in m and 'SIGKILL' in m and 'restart 1 of 3' in m for m in messages)


def test_call_in_flight_fails_unavailable_and_the_next_call_succeeds():
    """A call the node never answers fails with CourierUnavailableError; later calls get through."""
    program, handle = _member_program()
    with lp.launch(program, launch_type='test_mp', failure_policy={'member': _QUICK}) as controller:
        client = handle.dereference()
        pid = client.who()['pid']
        in_flight = client.futures.hold()
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(courier.CourierUnavailableError):
            in_flight.result(timeout=30)
        wait_for(lambda: _state(controller).pid != pid, what='the death to be seen')
        assert client.who()['pid'] != pid  # Waits for the node to be back if it is not yet.
        assert _state(controller).restarts == 1


@pytest.mark.parametrize('transport', ['auto', 'tcp'])
def test_calls_and_futures_after_a_restart_go_through_at_once(transport):
    """Over the Unix socket and raw TCP, the first call and the first future after the node
    is back succeed: connections its predecessor left are replaced, not used."""
    program, handle = _member_program()
    with lp.launch(program, launch_type='test_mp', failure_policy={'member': _QUICK}) as controller:
        client = courier.Client(handle.address.resolve(), transport=transport)
        old = client.futures.who().result(timeout=30)['pid']
        assert client.who()['pid'] == old  # Both kinds of connection are open now.
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: _state(controller).state == lp.NodeState.RUNNING
                 and _state(controller).restarts == 1, what='the restart')
        new = client.futures.who().result(timeout=30)['pid']
        assert new != old and client.who()['pid'] == new


def test_failures_beyond_max_restarts_stop_the_program_saying_why(tmp_path):
    """A node that always fails is restarted max_restarts times, then wait() raises, saying so."""
    program = lp.Program('crash_loop')
    program.add_node(lp.PyNode(always_crash, str(tmp_path / 'starts')), label='crasher')
    program.add_node(lp.CourierNode(Member), label='member')
    policy = lp.Restart(max_restarts=2, backoff=(0.05, 0.1))
    controller = lp.launch(program, launch_type='test_mp', failure_policy={'crasher': policy})
    with pytest.raises(lp.NodeFailedError, match=r"'crasher'.*always fails.*restarted 2 times"
                                                 r".*max_restarts=2") as info:
        controller.wait(timeout=60)
    assert isinstance(info.value.__cause__, ValueError)
    states = {s.label: (s.state, s.restarts) for s in controller.statuses()}
    assert states == {'crasher': (lp.NodeState.FAILED, 2), 'member': (lp.NodeState.STOPPED, 0)}
    assert len((tmp_path / 'starts').read_text().split()) == 3


def test_restarts_back_off_exponentially(tmp_path):
    """Restart n waits at least half of min(maximum, initial * 2**n): the starts spread out."""
    path = tmp_path / 'starts'
    program = lp.Program('backoff')
    program.add_node(lp.PyNode(always_crash, str(path)), label='crasher')
    policy = lp.Restart(max_restarts=3, backoff=(0.2, 0.6))
    controller = lp.launch(program, launch_type='test_mp', failure_policy={'crasher': policy})
    with pytest.raises(lp.NodeFailedError):
        controller.wait(timeout=60)
    starts = [float(t) for t in path.read_text().split()]
    gaps = [later - earlier for earlier, later in zip(starts, starts[1:])]
    assert len(gaps) == 3
    for n, gap in enumerate(gaps):
        assert gap >= min(0.6, 0.2 * 2 ** n) / 2, (n, gaps)


def test_backoff_delay_is_jittered_within_its_bounds():
    """delay(n) lies in [b/2, b] for b = min(maximum, initial * 2**n), and varies."""
    policy = lp.Restart(max_restarts=50, backoff=(1.0, 60.0))
    rng = random.Random(4)
    for n in range(12):
        bound = min(60.0, 2.0 ** n)
        delays = [policy.delay(n, rng) for _ in range(50)]
        assert all(bound / 2 <= d <= bound for d in delays)
        assert len(set(delays)) > 1
    assert policy.allows(49) and not policy.allows(50)


def test_node_failing_before_it_is_ready_is_restarted_before_launch_returns(tmp_path):
    """A node whose first start fails before it is ready: lp.launch returns once its restart
    serves, instead of failing the launch."""
    program, handle = _member_program('late_start')
    env = {'LAUNCHPAD_PY_PRELOAD': 'fail_first_start', 'LP_TEST_FAIL_FILE': str(tmp_path / 'x')}
    with lp.launch(program, launch_type='test_mp', failure_policy={'member': _QUICK},
                   resources={'member': lp.PythonProcess(env=env)}) as controller:
        status = _state(controller)
        assert (status.state, status.restarts) == (lp.NodeState.RUNNING, 1)
        assert handle.dereference().who()['pid'] == status.pid


def test_stop_program_policy_stops_like_the_default(tmp_path):
    """lp.StopProgram() named for a group: its failure stops the program; others restart."""
    program = lp.Program('mixed_policies')
    program.add_node(lp.PyNode(crash_first_times, str(tmp_path / 'a'), 1), label='restarted')
    program.add_node(lp.PyNode(always_crash, str(tmp_path / 'b')), label='stopper')
    controller = lp.launch(program, launch_type='test_mp', failure_policy={
        'restarted': _QUICK, 'stopper': lp.StopProgram()})
    with pytest.raises(lp.NodeFailedError, match="'stopper'") as info:
        controller.wait(timeout=60)
    assert 'restarted' not in str(info.value).split('\n')[0]


def test_stop_while_a_node_waits_to_restart_ends_it_at_once():
    """A node in its backoff when the program stops ends as STOPPED; the stop does not wait."""
    program, handle = _member_program()
    slow = lp.Restart(max_restarts=3, backoff=(600.0, 600.0))
    controller = lp.launch(program, launch_type='test_mp', failure_policy={'member': slow})
    os.kill(handle.dereference().who()['pid'], signal.SIGKILL)
    wait_for(lambda: _state(controller).state == lp.NodeState.RESTARTING, what='the backoff')
    controller.stop(timeout=30)
    controller.wait(timeout=5)
    assert _state(controller).state == lp.NodeState.STOPPED


def test_thread_node_is_restarted_under_test_mt(tmp_path):
    """Under test_mt a node that raised runs again in a new thread, from a fresh copy."""
    path = tmp_path / 'starts'
    program = lp.Program('threads')
    program.add_node(lp.PyNode(crash_first_times, str(path), 2), label='flaky')
    with lp.launch(program, launch_type='test_mt', failure_policy={'flaky': _QUICK}) as controller:
        wait_for(lambda: _state(controller, 'flaky').restarts == 2
                 and _state(controller, 'flaky').state == lp.NodeState.RUNNING, what='2 restarts')
    assert len(path.read_text().split()) == 3


def test_colocated_child_restarts_with_the_shared_backoff(tmp_path):
    """MultiProcessingColocation retries go through lp.Restart: the restart waits its backoff."""
    from launchpad_py.nodes import colocation_processes
    path = tmp_path / 'starts'
    program = lp.Program('colocated_backoff')
    program.add_node(lp.MultiProcessingColocation(
        [lp.PyNode(crash_first_times, str(path), 1)], num_retries_on_failure=1), label='pair')
    controller = lp.launch(program, launch_type='test_mp')
    wait_for(lambda: path.exists() and len(path.read_text().split()) == 2, what='the restart')
    controller.stop(grace=2)
    first, second = (float(t) for t in path.read_text().split())
    assert second - first >= colocation_processes._BACKOFF_S[0] / 2


def test_failure_policy_naming_an_unknown_group_is_an_error():
    """A group name not in the program is an error, as for resources."""
    program, _ = _member_program()
    with pytest.raises(lp.ProgramError, match=r"names groups \['actor'\].*groups are \['member'\]"):
        lp.launch(program, launch_type='test_mp', failure_policy={'actor': lp.Restart()})


@pytest.mark.parametrize('policy, match', [
    ('restart', r"failure_policy\['member'\] must be lp.Restart"),
    (None, r"failure_policy\['member'\] must be lp.Restart"),
])
def test_failure_policy_values_must_be_policies(policy, match):
    """Anything but lp.Restart / lp.StopProgram is refused, naming the group."""
    program, _ = _member_program()
    with pytest.raises(lp.ProgramError, match=match):
        lp.launch(program, launch_type='test_mp', failure_policy={'member': policy})


@pytest.mark.parametrize('kwargs, match', [
    ({'max_restarts': -1}, 'max_restarts must be an int >= 0'),
    ({'max_restarts': 2.5}, 'max_restarts must be an int >= 0'),
    ({'backoff': (5.0, 1.0)}, r'0 <= initial <= maximum.*\(5.0, 1.0\)'),
    ({'backoff': 3}, 'backoff must be'),
    ({'max_uncounted': -1}, r'max_uncounted must be an int >= 0 \(got -1\)'),
    ({'max_uncounted': True}, r'max_uncounted must be an int >= 0 \(got True\)'),
])
def test_restart_arguments_are_checked(kwargs, match):
    """Bad max_restarts, max_uncounted or backoff values say what was expected."""
    with pytest.raises(ValueError, match=match):
        lp.Restart(**kwargs)


def test_launcher_that_cannot_restart_rejects_a_restart_policy():
    """A launcher whose workers cannot restart refuses lp.Restart before starting anything."""

    class NoRestartWorker(ThreadWorker):
        can_restart = False

    def launch_plain(program, options):
        controller = ProgramController(program.name, 'plain', options.grace, False,
                                       failure_policy=options.failure_policy)
        from launchpad_py.supervision.launch_kit import shipping
        executables = [e for e, _ in shipping.prepare(program, serialize=False)]
        return controller.start([NoRestartWorker(e, controller.scope, controller.events)
                                 for e in executables])

    registry.register('plain_test', launch_plain)
    program, _ = _member_program()
    with pytest.raises(lp.ProgramError, match=r"failure_policy\['member'\].*plain cannot restart "
                                              r"node member/0"):
        lp.launch(program, launch_type='plain_test', failure_policy={'member': _QUICK})


def test_deadlines_pop_in_order_of_their_moments():
    """The supervisors' deadline list hands back due keys earliest first, and forgets them."""
    deadlines = failure_policy.Alarms()
    assert deadlines.wait_time() is None
    now = time.monotonic()
    deadlines.set('late', now - 1)
    deadlines.set('early', now - 2)
    deadlines.set('future', now + 3600)
    assert 3500 < deadlines.wait_time() or deadlines.wait_time() == 0.0
    assert deadlines.pop_due() == ['early', 'late'] and 'future' in deadlines
    deadlines.cancel('future')
    assert deadlines.wait_time() is None


@needs_ssh_hosts
def test_node_on_another_host_restarts_at_its_address():
    """Under ssh a killed node starts again on its host with its old host:port, through the
    same host agent (no new ssh session)."""
    program, handle = _member_program('ssh_restarts')
    with lp.launch(program, launch_type='ssh', resources={'member': ssh_host('h2')},
                   failure_policy={'member': _QUICK}) as controller:
        client = handle.dereference()
        address = handle.address.resolve()
        old, new = _kill_and_wait_back(controller, client)
        assert new != old and address.startswith('10.250.0.12:')
        assert handle.address.resolve() == address and _state(controller).host == host_name('h2')
        # The restart went through h2's agent: still the one ssh session to h2.
        assert len([p for p in psutil.Process().children() if p.name() == 'ssh']) == 1
