"""lp.Restart, failures the cluster caused, and elastic groups on Kubernetes (the fake API).

A restarted node is a new pod (``-r1``) at a new address; its clients lose
one call at most, then find it through the launcher. Pods run as real
processes on the namespace hosts h1..h3 (see test_kubernetes.py), so a node
whose host was cordoned really comes back at another IP.
"""

from __future__ import annotations

import threading

import pytest

import launchpad_py as lp
from launchpad_py import courier
from launchpad_py.supervision import controller as controller_module
from conftest import needs_ssh_hosts, wait_for
from kubernetes_nodes import (Movable, PeerCaller, image_for_every_group,
                              note_stop_then_ignore_it, options)
from restart_nodes import Member, Watcher

pytest.importorskip('kubernetes', reason="the [kubernetes] extra is not installed "
                                         "(pip install 'launchpad_py[kubernetes]')")
_QUICK = lp.Restart(max_restarts=3, backoff=(0.05, 0.2))


def _status(controller, label='movable'):
    return next(s for s in controller.statuses() if s.label == label)


def _launch(program, policy):
    return lp.launch(program, launch_type='kubernetes', resources=image_for_every_group(program),
                     kubernetes_options=options(), failure_policy=policy)


def _moving_program(name):
    program = lp.Program(name)
    movable = program.add_node(lp.CourierNode(Movable), label='movable')
    caller = program.add_node(lp.CourierNode(PeerCaller, movable), label='caller')
    return program, movable, caller


def _back(controller, reasons=None):
    reasons = reasons or {'failed': 1}
    wait_for(lambda: (_status(controller).state, _status(controller).restarts,
                      _status(controller).restart_reasons)
             == (lp.NodeState.RUNNING, sum(reasons.values()), reasons), timeout=60,
             what='the new pod')


@needs_ssh_hosts
def test_crashed_pod_comes_back_as_a_new_pod_and_its_clients_follow(kubernetes_cluster):
    """A node that crashes once is a new pod (-r1) on another host and port; a peer in
    another pod loses one call at most, then reaches it; the old pod and Secret are gone."""
    program, movable, caller = _moving_program('moves')
    with _launch(program, {'movable': _QUICK}) as controller:
        first_pod, first_address = _status(controller).host, movable.address.resolve()
        peer = caller.dereference()
        assert peer.peer_who()['lost'] == 0
        kubernetes_cluster.kubelet.nodes[0].cordoned = True  # The next pod goes to h2.
        client = movable.dereference()
        with pytest.raises(courier.CourierUnavailableError):
            client.crash()
        _back(controller)
        assert _status(controller).host == f'{first_pod}-r1'
        moved = movable.address.resolve()
        assert moved != first_address and moved.startswith('10.250.0.12:')
        answer = peer.peer_who()
        assert answer['lost'] <= 1 and answer['who']['name'] == 'movable/0'
        assert client.who()['pid'] == answer['who']['pid']  # The launcher's client follows too.
        names = {name for _, name in kubernetes_cluster.objects()}
        assert first_pod not in names and f'{first_pod}-boot' not in names
        assert f'{first_pod}-r1' in names
    wait_for(lambda: kubernetes_cluster.objects() == [], timeout=15, what='every object deleted')


@needs_ssh_hosts
def test_evicted_pod_restarts_without_counting_against_max_restarts(kubernetes_cluster):
    """An evicted pod is not its node's fault: it comes back even under max_restarts=0, counted
    under its reason, evicted (statuses, statistics, Prometheus)."""
    from launchpad_py.observability import prometheus
    program, movable, caller = _moving_program('evicted')
    with _launch(program, {'movable': lp.Restart(max_restarts=0, backoff=(0.05, 0.1))}
                 ) as controller:
        pod = _status(controller).host
        kubernetes_cluster.kubelet.evict('default', pod)
        _back(controller, {'evicted': 1})
        assert caller.dereference().peer_who()['who']['name'] == 'movable/0'
        stats = next(s for s in controller.statistics() if s.label == 'movable')
        assert stats.restart_reasons == {'evicted': 1}
        text = prometheus.exposition('evicted', controller.statistics())
        assert ('lp_node_restarts_by_reason_total{program="evicted",node="movable/0",'
                'reason="evicted"} 1') in text


def _launching(name: str) -> lp.ProgramController:
    """The controller of program ``name`` while ``lp.launch`` has not returned it yet."""
    return wait_for(lambda: next((c for c in controller_module.running_programs()
                                  if c.name == name), None), timeout=60, what=f'{name} to start')


@needs_ssh_hosts
def test_pod_evicted_while_the_launch_waits_for_another_restarts_and_the_launch_goes_on(
        kubernetes_cluster):
    """The movable pod is evicted after its node dialed back, while the launch still waits for
    a pod the cluster holds: it comes back (uncounted), the caller (no restart policy) goes
    on waiting, and once the held pod starts the launch completes. The launcher tells the
    waiting nodes that the evicted node's address moved; they took that for a stop and
    ended, and the program failed to start naming the caller (3 of 100 podman fault runs)."""
    program, movable, caller = _moving_program('evicted_at_launch')
    program.add_node(lp.CourierNode(Movable), label='late')
    release = kubernetes_cluster.kubelet.hold('-late-')
    launched = {}

    def launch() -> None:
        try:
            launched['controller'] = _launch(program, {'movable': _QUICK})
        except Exception as exc:  # The test's failure, reported below.
            launched['error'] = exc

    thread = threading.Thread(target=launch, name='test-launch')
    thread.start()
    try:
        starting = _launching('evicted_at_launch')
        first = wait_for(lambda: _status(starting).pid and _status(starting, 'caller').pid
                         and _status(starting), timeout=60, what='movable and caller to dial back')
        kubernetes_cluster.kubelet.evict('default', first.host)
        wait_for(lambda: _status(starting).restarts == 1 and _status(starting).pid,
                 timeout=60, what="movable's new pod to dial back")
    finally:
        release.set()
        thread.join(120)
    assert 'error' not in launched, launched['error']
    with launched['controller'] as controller:
        assert caller.dereference().peer_who()['who']['name'] == 'movable/0'
        assert [(s.label, s.restarts, s.restart_reasons) for s in controller.statuses()] == [
            ('movable', 1, {'evicted': 1}), ('caller', 0, {}), ('late', 0, {})]
    wait_for(lambda: kubernetes_cluster.objects() == [], timeout=15, what='every object deleted')


@needs_ssh_hosts
def test_crash_beyond_max_restarts_still_stops_the_program(kubernetes_cluster):
    """A crash is the node's own failure: with max_restarts=0 it stops the program."""
    program, movable, _ = _moving_program('exhausted')
    controller = _launch(program, {'movable': lp.Restart(max_restarts=0)})
    with pytest.raises(courier.CourierUnavailableError):
        movable.dereference().crash()
    with pytest.raises(lp.NodeFailedError, match=r"'movable'.*max_restarts=0"):
        controller.wait(timeout=60)
    wait_for(lambda: kubernetes_cluster.objects() == [], timeout=15, what='every object deleted')


@needs_ssh_hosts
def test_elastic_group_grows_and_shrinks_by_pods(kubernetes_cluster):
    """add_nodes creates a pod that a peer pod reaches through its group handle;
    remove_nodes stops it and deletes its pod and Secret."""
    program = lp.Program('elastic')
    with program.group('member', elastic=True):
        program.add_node(lp.CourierNode(Member))
    watcher = program.add_node(lp.CourierNode(Watcher, program.group_handle('member')),
                               label='watcher')
    with _launch(program, None) as controller:
        seen = watcher.dereference()
        version = seen.members()['version']
        (added,) = controller.add_nodes('member', 1, timeout=60)
        assert added.host.endswith('-member-1')
        seen.wait_for_change(version, 30)
        assert seen.members()['answers'] == ['member/0', 'member/1']
        (gone,) = controller.remove_nodes('member', 1, timeout=60)
        assert gone.state == lp.NodeState.STOPPED
        wait_for(lambda: added.host not in {n for _, n in kubernetes_cluster.objects()},
                 timeout=15, what='the removed pod to be deleted')
        assert f'{added.host}-boot' not in {n for _, n in kubernetes_cluster.objects()}
        assert seen.members()['answers'] == ['member/0']


@needs_ssh_hosts
def test_pod_deleted_by_the_cluster_comes_back_under_restart(kubernetes_cluster):
    """A pod the cluster deletes (preemption, a drained node: kubectl delete pod) is started
    again as a new pod under lp.Restart, not counted (reason: deleted), and the program goes
    on."""
    program, movable, caller = _moving_program('preempted')
    with _launch(program, {'movable': lp.Restart(max_restarts=0, backoff=(0.05, 0.1))}
                 ) as controller:
        pod = _status(controller).host
        kubernetes_cluster.store.delete('pods', 'default', pod)
        _back(controller, {'deleted': 1})
        assert _status(controller).host == f'{pod}-r1'
        assert caller.dereference().peer_who()['who']['name'] == 'movable/0'
        assert controller.is_running


@needs_ssh_hosts
@pytest.mark.parametrize('per_pod', [1, 2])
def test_pod_deleted_after_the_stop_began_is_part_of_the_stop(kubernetes_cluster, tmp_path,
                                                              per_pod, monkeypatch):
    """The stop has reached restartable nodes (they ignore it); then their pod is deleted by
    someone else. That ends them as the stop would: STOPPED, no failure, no restart (before,
    the deletion was judged the cluster's doing and failed the program). A pod per node, and
    two nodes packed in one pod. (Its node ignores the deletion's SIGTERM too: the launcher
    waits out its last words, 5 s, before it cuts the channel; 0.5 s here.)"""
    from launchpad_py.launchers.remote import worker
    monkeypatch.setattr(worker, 'LAST_WORDS_S', 0.5)
    program = lp.Program('deleted_in_stop')
    with program.group('deaf'):
        for index in range(per_pod):
            program.add_node(lp.PyNode(note_stop_then_ignore_it, str(tmp_path / f'heard{index}')))
    controller = lp.launch(program, launch_type='kubernetes', kubernetes_options=options(),
                           resources=image_for_every_group(program, nodes_per_pod=per_pod),
                           failure_policy={'deaf': _QUICK})
    (pod,) = {s.host for s in controller.statuses()}
    controller.request_stop(grace=120)
    for index in range(per_pod):
        wait_for((tmp_path / f'heard{index}').exists, timeout=30,
                 what=f'node deaf/{index} to hear the stop request')
    kubernetes_cluster.store.delete('pods', 'default', pod)
    controller.stop(timeout=60)  # Raises nothing: the program stopped, as asked.
    controller.wait(timeout=5)
    assert [(s.state, s.restarts) for s in controller.statuses()] == [
        (lp.NodeState.STOPPED, 0)] * per_pod, controller.statuses()
    assert controller.killed_nodes == []
    wait_for(lambda: kubernetes_cluster.objects() == [], timeout=15, what='every object deleted')


@needs_ssh_hosts
def test_evicted_pod_without_a_restart_policy_fails_the_program_saying_why(kubernetes_cluster):
    """Without lp.Restart an evicted pod stops the program, and wait() names the eviction."""
    program, _, _ = _moving_program('evicted_stops')
    controller = _launch(program, None)
    pod = _status(controller).host
    kubernetes_cluster.kubelet.evict('default', pod)
    with pytest.raises(lp.NodeFailedError, match=rf"'movable'.*pod {pod} was ended by the "
                                                 r"cluster \(Evicted: The node was low"):
        controller.wait(timeout=60)
    wait_for(lambda: kubernetes_cluster.objects() == [], timeout=15, what='every object deleted')


@pytest.mark.parametrize('status, reason', [
    ({'phase': 'Failed', 'reason': 'Evicted', 'message': 'low on memory'}, 'Evicted: low on memory'),
    ({'phase': 'Running', 'conditions': [{'type': 'DisruptionTarget', 'status': 'True',
                                          'reason': 'PreemptionByScheduler'}]},
     'PreemptionByScheduler'),
    ({'phase': 'Failed', 'reason': 'NodeLost'}, 'NodeLost'),
    ({'phase': 'Failed'}, None),  # The container failed by itself: the node's own failure.
    ({'phase': 'Running', 'conditions': [{'type': 'DisruptionTarget', 'status': 'False'}]}, None),
])
def test_what_the_cluster_did_is_read_from_the_pod_status(status, reason):
    """Eviction, preemption and a lost node are told apart from a container's own failure."""
    from launchpad_py.launchers.kubernetes.pods import _taken_reason
    assert _taken_reason({'status': status}) == reason


@pytest.mark.parametrize('taken, lost_by', [
    ('Evicted: low on memory', 'evicted'),
    ('TerminationByKubelet: node pressure', 'node_lost'),
    ('PreemptionByScheduler', 'preempted'),
    ('NodeLost', 'node_lost'),
    ('DeletionByTaintManager: the node is unreachable', 'node_lost'),
])
def test_what_the_cluster_did_becomes_one_restart_reason(taken, lost_by):
    """The cluster's words become the one short reason statuses and Prometheus show."""
    from launchpad_py.launchers.kubernetes.pods import lost_reason
    assert lost_reason(taken) == lost_by
