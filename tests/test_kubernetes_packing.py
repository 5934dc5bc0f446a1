"""Nodes packed N per pod (``KubernetesResources(nodes_per_pod=N)``) against the fake API server.

Each packed pod runs the pod agent, which dials back to the launcher and
forks the pod's nodes; pods run as real processes on the namespace hosts
h1..h3 (see test_kubernetes.py), so nodes really serve, fail and restart.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import yaml

import launchpad_py as lp
from conftest import REPO, launcher_report, needs_ssh_hosts, wait_for
from fake_kube import IMAGE
from kubernetes_nodes import Movable, options

pytest.importorskip('kubernetes', reason="the [kubernetes] extra is not installed "
                                         "(pip install 'launchpad_py[kubernetes]')")
_QUICK = lp.Restart(max_restarts=3, backoff=(0.05, 0.2))


def _program(name: str, nodes: int, elastic: bool = False):
    program = lp.Program(name)
    with program.group('worker', elastic=elastic):
        handles = [program.add_node(lp.CourierNode(Movable)) for _ in range(nodes)]
    return program, handles


def _launch(program, per_pod: int, policy=None):
    return lp.launch(program, launch_type='kubernetes',
                     resources={'worker': lp.KubernetesResources(image=IMAGE,
                                                                 nodes_per_pod=per_pod)},
                     kubernetes_options=options(), failure_policy=policy)


def _pods(cluster) -> list[str]:
    return [name for kind, name in cluster.objects() if kind == 'Pod']


def _statuses(controller) -> dict[int, lp.NodeStatus]:
    return {s.index: s for s in controller.statuses() if s.label == 'worker'}


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@needs_ssh_hosts
def test_twelve_nodes_four_per_pod_run_in_three_pods_answer_and_stop_clean(kubernetes_cluster):
    """12 nodes at 4 per pod are 3 pods; every node answers at its own address in its pod;
    stop leaves no pod, Secret or process."""
    program, handles = _program('packed', 12)
    controller = _launch(program, 4)
    with controller:
        pods = _pods(kubernetes_cluster)
        assert len(pods) == 3 and all(p.endswith(('-p0', '-p1', '-p2')) for p in pods)
        answers = [h.dereference().who() for h in handles]
        assert [a['name'] for a in answers] == [f'worker/{i}' for i in range(12)]
        pids = {a['pid'] for a in answers}
        assert len(pids) == 12
        hosts = [s.host for s in sorted(controller.statuses(), key=lambda s: s.index)]
        assert hosts == [pods[i // 4] for i in range(12)]
        addresses = [h.address.resolve() for h in handles]
        assert len(set(addresses)) == 12  # Each its own port...
        for first in range(0, 12, 4):  # ...at its pod's IP.
            assert len({a.rpartition(':')[0] for a in addresses[first:first + 4]}) == 1
    wait_for(lambda: kubernetes_cluster.objects() == [], timeout=30, what='every object deleted')
    wait_for(lambda: all(_gone(pid) for pid in pids), timeout=15, what='every node process gone')
    wait_for(lambda: kubernetes_cluster.kubelet.running() == [], timeout=15,
             what='every pod agent ended')  # The kubelet reaps a container asynchronously.


@needs_ssh_hosts
def test_a_node_killed_inside_its_pod_restarts_alone(kubernetes_cluster):
    """SIGKILL to one node's process: it restarts in the same pod (counted), the other 11 and
    the pods are untouched, and it answers again."""
    program, handles = _program('packed_kill', 12)
    with _launch(program, 4, {'worker': _QUICK}) as controller:
        pods = _pods(kubernetes_cluster)
        before = {i: h.dereference().who()['pid'] for i, h in enumerate(handles)}
        os.kill(before[5], signal.SIGKILL)
        wait_for(lambda: (_statuses(controller)[5].restarts,
                          _statuses(controller)[5].state) == (1, lp.NodeState.RUNNING),
                 timeout=60, what='worker/5 back')
        again = handles[5].dereference().who()
        assert again['name'] == 'worker/5' and again['pid'] != before[5]
        assert _statuses(controller)[5].host == pods[1]
        assert {i: h.dereference().who()['pid'] for i, h in enumerate(handles) if i != 5} == {
            i: pid for i, pid in before.items() if i != 5}
        assert [s.restarts for i, s in sorted(_statuses(controller).items()) if i != 5] == [0] * 11
        assert _pods(kubernetes_cluster) == pods


@needs_ssh_hosts
def test_a_deleted_pod_brings_its_four_nodes_back_uncounted(kubernetes_cluster):
    """Deleting a packed pod ends its 4 nodes; under max_restarts=0 they come back in its next
    run (-r1) as 'deleted', not counted against the limit; the other pods' nodes go on."""
    program, handles = _program('packed_lost', 12)
    with _launch(program, 4, {'worker': lp.Restart(max_restarts=0, backoff=(0.05, 0.1))}
                 ) as controller:
        pods = _pods(kubernetes_cluster)
        others = {i: handles[i].dereference().who()['pid'] for i in (0, 11)}
        kubernetes_cluster.store.delete('pods', 'default', pods[1])

        def back():
            statuses = _statuses(controller)
            return [(statuses[i].state, statuses[i].restart_reasons, statuses[i].host)
                    for i in range(4, 8)]
        wait_for(lambda: back() == [(lp.NodeState.RUNNING, {'deleted': 1}, f'{pods[1]}-r1')] * 4,
                 timeout=90, what='the pod\'s 4 nodes back in its next run')
        assert [handles[i].dereference().who()['name'] for i in range(4, 8)] == [
            f'worker/{i}' for i in range(4, 8)]
        assert {i: handles[i].dereference().who()['pid'] for i in (0, 11)} == others
        assert controller.is_running
    wait_for(lambda: kubernetes_cluster.objects() == [], timeout=30, what='every object deleted')


@needs_ssh_hosts
def test_elastic_packed_group_grows_into_a_new_pod_and_shrinks_out_of_it(kubernetes_cluster):
    """add_nodes puts new nodes in a new pod (filled nodes_per_pod at a time); once they have
    all been removed, that pod and its Secret are deleted."""
    program, handles = _program('packed_grow', 2, elastic=True)
    with _launch(program, 2) as controller:
        (first, second) = controller.add_nodes('worker', 2, timeout=60)
        assert first.host == second.host and first.host.endswith('-p1')
        assert first.host in _pods(kubernetes_cluster)
        gone = controller.remove_nodes('worker', 2, timeout=60)
        assert {g.state for g in gone} == {lp.NodeState.STOPPED}
        wait_for(lambda: first.host not in {n for _, n in kubernetes_cluster.objects()}
                 and f'{first.host}-boot' not in {n for _, n in kubernetes_cluster.objects()},
                 timeout=30, what='the emptied pod and its Secret deleted')
        assert [h.dereference().who()['name'] for h in handles] == ['worker/0', 'worker/1']


@needs_ssh_hosts
def test_launcher_killed_leaves_no_packed_pod_node_or_object(kubernetes_cluster):
    """SIGKILL the launcher of packed pods: each pod agent sees its connection end, kills its
    nodes and exits; the lease runs out and the GC deletes every object."""
    import psutil
    launcher = subprocess.Popen(
        [sys.executable, os.path.join(REPO, 'tests', 'kubernetes_nodes.py'), '3', '3'],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
        env={**os.environ, 'PYTHONPATH': os.path.join(REPO, 'tests')})
    hosts = launcher_report(launcher.stdout)
    assert len(hosts) == 4 and len(set(hosts)) == 2 and len(_pods(kubernetes_cluster)) == 2
    agents = [p for p in psutil.process_iter(['cmdline'])
              if 'launchpad_py.node_side.pod_agent' in (p.info['cmdline'] or [])]
    assert len(agents) >= 6  # 2 agents and their 4 nodes (forks: the same command line).
    launcher.send_signal(signal.SIGKILL)
    launcher.wait(timeout=10)
    launcher.stdout.close()

    def running(process) -> bool:
        try:  # (It may end between the two questions.)
            return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    wait_for(lambda: not any(map(running, agents)), timeout=20,
             what='every agent and node to end')
    wait_for(lambda: kubernetes_cluster.objects() == [], timeout=30, what='the lease to run out')


@pytest.mark.parametrize('bad', [0, -2, 2.5, '4', True])
def test_a_bad_nodes_per_pod_is_refused_naming_the_group(bad, tmp_path):
    """0, negative, non-int: a clear error naming the group and the value, before anything."""
    program, _ = _program('bad_packing', 3)
    with pytest.raises(lp.ResourcesError, match=rf"group 'worker'.*nodes_per_pod.*\(got "
                                                rf"{bad!r}\)"):
        lp.launch(program, launch_type='kubernetes',
                  resources={'worker': lp.KubernetesResources(image=IMAGE, nodes_per_pod=bad)},
                  kubernetes_options={'manifests_dir': str(tmp_path)})


def test_dry_run_manifests_show_the_packing(tmp_path):
    """10 nodes at 4 per pod: 3 pods (4, 4, 2 nodes) running the pod agent, a Secret each."""
    program, _ = _program('packed_dry', 10)
    lp.launch(program, launch_type='kubernetes',
              resources={'worker': lp.KubernetesResources(image=IMAGE, nodes_per_pod=4)},
              kubernetes_options={'manifests_dir': str(tmp_path)})
    documents = [yaml.safe_load(open(tmp_path / name)) for name in sorted(os.listdir(tmp_path))]
    pods = [d for d in documents if d['kind'] == 'Pod']
    assert [d['kind'] for d in documents].count('Secret') == 3 and len(pods) == 3
    assert [p['metadata']['annotations']['launchpad-py/node-names'] for p in pods] == [
        'worker/0,worker/1,worker/2,worker/3', 'worker/4,worker/5,worker/6,worker/7',
        'worker/8,worker/9']
    assert all(p['spec']['containers'][0]['command'][-1] == 'launchpad_py.node_side.pod_agent'
               for p in pods)
