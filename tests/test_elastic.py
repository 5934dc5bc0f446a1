"""Elastic groups: nodes join and leave a running program; group handles follow the members."""

from __future__ import annotations

import os
import signal
import threading

import pytest

import launchpad_py as lp
from launchpad_py.observability import prometheus
from conftest import host_name, needs_ssh_hosts, ssh_host, wait_for
from restart_nodes import Member, MemberCaller, Watcher, ignore_stop


def _program(members=2, name='elastic'):
    """An elastic group of Members and a Watcher that reads the group's handle."""
    program = lp.Program(name)
    with program.group('member', elastic=True):
        for _ in range(members):
            program.add_node(lp.CourierNode(Member))
    members_handle = program.group_handle('member')
    watcher = program.add_node(lp.CourierNode(Watcher, members_handle), label='watcher')
    return program, members_handle, watcher


def _live(controller, label='member'):
    return sorted(s.index for s in controller.statuses()
                  if s.label == label and s.state == lp.NodeState.RUNNING)


def test_added_nodes_serve_and_the_group_handle_lists_them():
    """add_nodes starts copies of the first node with new indices; a node's group handle,
    and the launching process's, list them once they serve."""
    program, members, watcher = _program()
    with lp.launch(program, launch_type='test_mp') as controller:
        seen = watcher.dereference()
        before = seen.members()
        added = controller.add_nodes('member', 2)
        assert [(s.index, s.state) for s in added] == [(i, lp.NodeState.RUNNING) for i in (2, 3)]
        assert _live(controller) == [0, 1, 2, 3]
        # Each added node may be published on its own (they start at once, so in either
        # order): wait for the tables until one lists both; versions never go back.
        version, after = before['version'], before
        while len(after['names']) < 4:
            changed = seen.wait_for_change(version, 30)
            assert changed > version, f'no new members table in 30s after {after}'
            version, after = changed, seen.members()
        assert after['names'] == after['answers'] == [f'member/{i}' for i in range(4)]
        assert after['version'] >= version > before['version']
        local = members.dereference()
        assert [c.who()['pid'] for c in local.clients()] == [
            s.pid for s in controller.statuses() if s.label == 'member']


@pytest.mark.parametrize('launch_type', ['test_mp', 'local_mp'])
def test_member_tables_go_only_to_nodes_that_use_the_group_handle(launch_type):
    """A table is sent to a node once it dereferences the group handle, never to the others:
    sending every change to every node cost O(N) messages of O(N) members per change."""
    program, members, watcher = _program(members=3, name=f'tables_{launch_type}')
    with lp.launch(program, launch_type=launch_type) as controller:
        seen = watcher.dereference().members()
        assert seen['names'] == [f'member/{i}' for i in range(3)]
        clients = members.dereference().clients()
        assert [client.member_tables() for client in clients] == [[], [], []]
        controller.add_nodes('member', 1)  # A change after the launch goes to the watcher only.
        assert wait_for(lambda: len(watcher.dereference().members()['names']) == 4, 30)
        assert [c.member_tables() for c in members.dereference().clients()] == [[]] * 4


def test_removed_nodes_are_the_newest_and_stop_gracefully():
    """remove_nodes stops the highest indices; they end STOPPED, out of the group handle."""
    program, members, watcher = _program(members=3)
    with lp.launch(program, launch_type='test_mp') as controller:
        version = watcher.dereference().members()['version']
        removed = controller.remove_nodes('member', 2)
        assert [(s.index, s.state, s.exit_code) for s in removed] == [
            (1, lp.NodeState.STOPPED, 0), (2, lp.NodeState.STOPPED, 0)]
        assert members.dereference().names() == ['member/0']  # The launcher's own: at once.
        # A node's table comes over its channel, as the removed nodes stop: wait for it.
        assert watcher.dereference().wait_for_change(version, 30) == version + 1
        assert watcher.dereference().members()['answers'] == ['member/0']
        assert controller.is_running
        controller.add_nodes('member', 1)  # Indices are not reused.
        assert _live(controller) == [0, 3]


def _call_a_member_that_left(launch_type, how, deadline, colocated=False, **launch_options):
    """member/2 of three leaves (remove_nodes) after a caller node made its client; the
    caller's calls to it must fail at once saying it left, those to member/1 still work.
    ``colocated``: the caller is a child process of a MultiProcessingColocation."""
    program = lp.Program(f'left_{launch_type}_{how}_{deadline}')
    with program.group('member', elastic=True):
        for _ in range(3):
            program.add_node(lp.CourierNode(Member))
    caller_node = lp.CourierNode(MemberCaller, program.group_handle('member'))
    if colocated:
        caller = caller_node.create_handle()
        program.add_node(lp.MultiProcessingColocation([caller_node]), label='caller')
    else:
        caller = program.add_node(caller_node, label='caller')
    with lp.launch(program, launch_type=launch_type, **launch_options) as controller:
        caller = caller.dereference()
        assert caller.take_clients() == ['member/0', 'member/1', 'member/2']
        (gone,) = controller.remove_nodes('member', 1, timeout=30)
        assert (gone.index, gone.state) == (2, lp.NodeState.STOPPED)  # It has ended.
        for _ in range(2):
            outcome = caller.futures.call_member('member/2', how, deadline).result(timeout=30)
            assert outcome.get('unavailable'), outcome
            assert "node 'member/2' left its group 'member'" in outcome['message'], outcome
            assert outcome['seconds'] < 10, outcome
        assert caller.call_member('member/1', how, deadline)['value']['name'] == 'member/1'


@pytest.mark.parametrize('launch_type', ['local_mp', 'local_mt'])
@pytest.mark.parametrize('how, deadline', [('sync', None), ('future', None), ('sync', 60)])
def test_a_call_to_a_member_that_left_fails_at_once_naming_it(launch_type, how, deadline):
    """A node holding a client of member/2 calls it after remove_nodes took it out and it
    ended: the call raises CourierUnavailableError within seconds, saying member/2 left its
    group (without a deadline it waited in gRPC's first hello for ever: the evolution
    strategies hang of stop 41), and so does the next one."""
    _call_a_member_that_left(launch_type, how, deadline)


def test_a_call_to_a_member_that_left_fails_at_once_from_a_colocated_child():
    """As above, the caller a child process of a MultiProcessingColocation: its parent
    passes on that member/2 left (before, only the parent learned it, and the child's call
    waited for member/2 to come back, for ever)."""
    _call_a_member_that_left('local_mp', 'sync', None, colocated=True)


@needs_ssh_hosts
def test_a_call_to_a_member_that_left_fails_at_once_across_hosts():
    """As above under ssh, the caller on another host than the members (raw TCP, whose
    first hello is gRPC's): the launcher tells the caller's process that member/2 left."""
    resources = {'member': [ssh_host('h1'), ssh_host('h2')], 'caller': ssh_host('h3')}
    _call_a_member_that_left('ssh', 'sync', None, resources=resources)


def test_removed_node_that_ignores_the_stop_is_killed_after_the_grace_period():
    """A leaving node that never stops is killed once the grace period is over."""
    program = lp.Program('stubborn')
    with program.group('member', elastic=True):
        program.add_node(lp.PyNode(ignore_stop))
    with lp.launch(program, launch_type='test_mp') as controller:
        controller.add_nodes('member', 1)
        (gone,) = controller.remove_nodes('member', 1, grace=0.5, timeout=30)
        assert gone.state == lp.NodeState.STOPPED and gone.exit_code == -signal.SIGKILL
        controller.stop(grace=0.5)  # member/0 ignores the stop too.


def test_group_handle_drops_a_restarting_member_and_takes_it_back():
    """A member in its restart backoff is not live; it is listed again once it serves."""
    program, members, _ = _program()
    policy = lp.Restart(max_restarts=2, backoff=(0.5, 0.5))
    with lp.launch(program, launch_type='test_mp', failure_policy={'member': policy}) as controller:
        live = members.dereference()
        version = live.version
        os.kill(live.clients()[1].who()['pid'], signal.SIGKILL)
        live.wait_for_change(version, 30)
        assert live.names() == ['member/0']
        live.wait_for_change(live.version, 30)
        assert live.names() == ['member/0', 'member/1']
        assert [s.restarts for s in controller.statuses() if s.label == 'member'] == [0, 1]


def test_colocated_children_follow_the_group_handle():
    """A node running as a child of a MultiProcessingColocation sees members join too."""
    program = lp.Program('colocated_watcher')
    with program.group('member', elastic=True):
        program.add_node(lp.CourierNode(Member))
    watcher_node = lp.CourierNode(Watcher, program.group_handle('member'))
    watcher = watcher_node.create_handle()
    program.add_node(lp.MultiProcessingColocation([watcher_node]), label='watcher')
    with lp.launch(program, launch_type='test_mp') as controller:
        seen = watcher.dereference()
        version = seen.members()['version']
        controller.add_nodes('member', 1)
        seen.wait_for_change(version, 30)
        assert seen.members()['answers'] == ['member/0', 'member/1']


def test_group_handle_works_under_local_threads():
    """Under test_mt the group handle of a (non-elastic) group lists its members."""
    program = lp.Program('threads_group')
    with program.group('member'):
        for _ in range(2):
            program.add_node(lp.CourierNode(Member))
    watcher = program.add_node(lp.CourierNode(Watcher, program.group_handle('member')),
                               label='watcher')
    with lp.launch(program, launch_type='test_mt'):
        assert watcher.dereference().members()['answers'] == ['member/0', 'member/1']


@pytest.mark.parametrize('call, match', [
    (lambda c: c.add_nodes('watcher', 1), r"group 'watcher' .* is not elastic.*elastic=True"),
    (lambda c: c.add_nodes('actor', 1), r"has no group 'actor'; its groups are \['member', "
                                        r"'watcher'\]"),
    (lambda c: c.add_nodes('member', 0), r'count must be an int >= 1 \(got 0'),
    (lambda c: c.remove_nodes('member', 3), r"group 'member' .* has 2 live nodes: cannot remove 3"),
])
def test_bad_requests_name_the_group_and_the_value(call, match):
    """Changing a group that is not elastic, unknown, or by a bad count is refused clearly."""
    program, _, _ = _program()
    with lp.launch(program, launch_type='test_mp') as controller:
        with pytest.raises(lp.ProgramError, match=match):
            call(controller)
        assert _live(controller) == [0, 1]


def test_setup_errors_name_the_group():
    """A group handle on a missing group, or an elastic group without nodes, is refused."""
    program = lp.Program('setup_errors')
    with pytest.raises(lp.ProgramError, match=r"no group 'member' to take a handle on"):
        program.group_handle('member')
    with program.group('member', elastic=True):
        pass
    program.add_node(lp.CourierNode(Member), label='other')
    with pytest.raises(lp.ProgramError, match=r"elastic groups \['member'\] .* have no nodes"):
        lp.launch(program, launch_type='test_mp')
    with pytest.raises(lp.ProgramError, match='elastic must be True or False'):
        with program.group('x', elastic='yes'):
            pass


@needs_ssh_hosts
def test_nodes_join_and_leave_across_hosts():
    """Under ssh added nodes go round-robin over the group's hosts and the handle follows."""
    program, members, watcher = _program(members=1, name='elastic_ssh')
    resources = {'member': [ssh_host('h1'), ssh_host('h2')], 'watcher': ssh_host('h3')}
    with lp.launch(program, launch_type='ssh', resources=resources) as controller:
        added = controller.add_nodes('member', 2)
        assert [s.host for s in added] == [host_name('h2'), host_name('h1')]
        wait_for(lambda: len(watcher.dereference().members()['answers']) == 3,
                 what='the watcher to see 3 members')
        version = watcher.dereference().members()['version']
        controller.remove_nodes('member', 1)
        assert watcher.dereference().wait_for_change(version, 30) == version + 1
        assert watcher.dereference().members()['answers'] == ['member/0', 'member/1']


class _Saver(Member):
    """A Member whose checkpoint hook and stop handler record that they ran, by node name."""

    def __init__(self):
        super().__init__()
        name = self.who()['name']  # Handlers run on other threads: no node context there.
        self.checkpoint = lambda: _SAVED.append(name)
        lp.register_stop_handler(lambda: _STOPPED.append(name))


_SAVED: list[str] = []    # Under test_mt the nodes share this process: these lists too.
_STOPPED: list[str] = []
_RELEASE = threading.Event()


def _stubborn():
    """Copies added to the group (index > 0) ignore their stop until the test releases them."""
    lp.wait_for_stop()
    if lp.get_node_context().index > 0:
        _RELEASE.wait(60)


def test_under_test_mt_a_removed_node_stops_alone_and_the_others_run_on():
    """Threads: add_nodes starts new node threads that serve; remove_nodes stops the newest
    alone (its checkpoint hook and stop handler run, its thread returns, STOPPED, exit 0),
    out of the group handle, while the other members keep serving."""
    program = lp.Program('elastic_mt')
    with program.group('member', elastic=True):
        program.add_node(lp.CourierNode(_Saver))
    members = program.group_handle('member')
    with lp.launch(program, launch_type='test_mt') as controller:
        added = controller.add_nodes('member', 2)
        assert [(s.index, s.state) for s in added] == [(1, lp.NodeState.RUNNING),
                                                      (2, lp.NodeState.RUNNING)]
        assert [c.who()['name'] for c in members.dereference().clients()] == [
            'member/0', 'member/1', 'member/2']
        (gone,) = controller.remove_nodes('member', 1, timeout=30)
        assert (gone.index, gone.state, gone.exit_code) == (2, lp.NodeState.STOPPED, 0)
        assert _SAVED == ['member/2'] and _STOPPED == ['member/2']
        assert [c.who()['name'] for c in members.dereference().clients()] == [
            'member/0', 'member/1']
        assert _live(controller) == [0, 1] and controller.is_running
    assert sorted(_STOPPED) == ['member/0', 'member/1', 'member/2']  # The program's stop.


def test_under_test_mt_a_removed_node_that_ignores_its_stop_is_reported_as_left_running(caplog):
    """Threads cannot be killed: a removed node still running after the grace period is
    named in a warning with its stack and ends LEFT_RUNNING (not STOPPED, which would hide a
    thread still running), as statuses, statistics and Prometheus say; the removal
    completes."""
    program = lp.Program('stubborn_mt')
    with program.group('member', elastic=True):
        program.add_node(lp.PyNode(_stubborn))
    try:
        with lp.launch(program, launch_type='test_mt') as controller:
            controller.add_nodes('member', 1)
            (gone,) = controller.remove_nodes('member', 1, grace=0.5, timeout=30)
            assert gone.index == 1 and gone.state == lp.NodeState.LEFT_RUNNING
            assert 'node member/1 did not return within the grace period' in caplog.text
            assert '_stubborn' in caplog.text  # Its stack.
            assert controller.is_running
            states = {s.name: s.state.value for s in controller.statistics()}
            assert states == {'member/0': 'running', 'member/1': 'left_running'}
            text = prometheus.exposition('stubborn_mt', controller.statistics())
            assert ('lp_node_state{program="stubborn_mt",node="member/1",state="left_running"} 1'
                    in text)
        # The program stops though the removed node's thread runs on, and says so.
        assert not controller.is_running
        left = [t for t in threading.enumerate() if t.name == 'lp-node-member/1']
        assert left and left[0].is_alive() and left[0].daemon
        assert ("program 'stubborn_mt' ended, but the threads of nodes removed earlier still "
                'run') in caplog.text
        assert 'member/1 (thread lp-node-member/1)' in caplog.text
    finally:
        _RELEASE.set()
