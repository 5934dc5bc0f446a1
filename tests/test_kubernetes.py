"""The Kubernetes launcher against a fake API server over real HTTP, driven by the official client.

No Kubernetes API server can run here: ``fake_kube`` implements exactly the
calls the launcher makes, and its kubelet runs each pod's container command
as a real process in a network-namespace host (h1..h3), so nodes really dial
back, serve and call each other. Real-cluster and podman runs are elsewhere
(test_kubernetes_podman.py, test_kubernetes_cluster.py).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

import launchpad_py as lp
from conftest import REPO, launcher_report, needs_ssh_hosts, wait_for
from fake_kube import IMAGE
from kubernetes_nodes import (ignore_stop, image_for_every_group, options, print_and_wait,
                              print_then_crash)
from nodes_for_tests import Pinger, serve_forever

pytest.importorskip('kubernetes', reason="the [kubernetes] extra is not installed "
                                         "(pip install 'launchpad_py[kubernetes]')")
PROGRAM_LABEL = 'launchpad-py/program'


@pytest.fixture
def cluster(kubernetes_cluster):
    return kubernetes_cluster


def _launch_pinger_and_waiter(name: str, **option_fields):
    """Launches a courier node and a waiting node; (controller, the pinger's handle)."""
    program = lp.Program(name)
    pinger = program.add_node(lp.CourierNode(Pinger), label='pinger')
    program.add_node(lp.PyNode(serve_forever), label='waiter')
    controller = lp.launch(program, launch_type='kubernetes',
                           resources=image_for_every_group(program),
                           kubernetes_options=options(**option_fields))
    return controller, pinger


@needs_ssh_hosts
def test_pods_serve_and_stop_deletes_every_object(cluster):
    """Pods serve calls; statuses show pod names; objects are labelled, owned; stop deletes all."""
    controller, pinger = _launch_pinger_and_waiter('served', namespace='research')
    with controller:
        assert pinger.dereference().ping(5) == ('pong', 5)
        hosts = sorted(s.host for s in controller.statuses())
        root = hosts[0].rsplit('-', 2)[0]
        assert hosts == [f'{root}-pinger-0', f'{root}-waiter-0']
        assert cluster.objects() == [('Job', root), ('Pod', hosts[0]), ('Pod', hosts[1]),
                                     ('Secret', f'{hosts[0]}-boot'), ('Secret', f'{hosts[1]}-boot')]
        (job,), _ = cluster.store.list('jobs', 'research')
        for resource in ('pods', 'secrets'):
            items, _ = cluster.store.list(resource, 'research')
            for item in items:
                assert item['metadata']['labels'][PROGRAM_LABEL] == root
                assert [r['uid'] for r in item['metadata']['ownerReferences']] == [
                    job['metadata']['uid']]
    assert cluster.objects() == []
    assert {s.state for s in controller.statuses()} == {lp.NodeState.STOPPED}


@needs_ssh_hosts
def test_program_secret_only_in_its_own_pod_secret(cluster):
    """The program secret is in each node's Secret, mounted only into that node's pod."""
    from launchpad_py.courier import auth
    controller, pinger = _launch_pinger_and_waiter('secretive')
    with controller:
        secret = auth.secret_for(pinger.address.resolve()).hex()
        pods, _ = cluster.store.list('pods', 'default')
        secrets, _ = cluster.store.list('secrets', 'default')
        for pod in pods:
            assert secret not in json.dumps(pod)
            (volume,) = pod['spec']['volumes']
            assert volume['secret']['secretName'] == pod['metadata']['name'] + '-boot'
        for item in secrets:
            boot = json.loads(base64.b64decode(item['data']['bootstrap.json']))
            assert boot['secret'] == secret


@needs_ssh_hosts
def test_crashed_container_fails_wait_with_its_log_tail(cluster):
    """A container that dies hard fails wait() with its exit code and the tail of its log."""
    program = lp.Program('crashing')
    program.add_node(lp.CourierNode(Pinger), label='pinger')
    program.add_node(lp.PyNode(print_then_crash, 3), label='crasher')
    controller = lp.launch(program, launch_type='kubernetes',
                           resources=image_for_every_group(program), kubernetes_options=options())
    with pytest.raises(lp.NodeFailedError, match=r"'crasher'.*connection to \S+-crasher-0 ended "
                                                 r"\(exited with code 3\)") as info:
        controller.wait(timeout=60)
    assert 'about to crash hard' in info.value.remote_traceback
    wait_for(lambda: cluster.objects() == [], timeout=15, what='every object to be deleted')


@needs_ssh_hosts
@pytest.mark.skipif(not shutil.which('kubectl'), reason='kubectl is not installed')
def test_kubectl_logs_shows_each_node_output(cluster):
    """`kubectl logs POD` (the real kubectl, against the fake API) shows that node's output."""
    program = lp.Program('logged')
    program.add_node(lp.PyNode(print_and_wait, 'hello from the talker'), label='talker')
    program.add_node(lp.PyNode(print_and_wait, 'hello from the other'), label='other')
    with lp.launch(program, launch_type='kubernetes', resources=image_for_every_group(program),
                   kubernetes_options=options()) as controller:
        for status in controller.statuses():
            def logged() -> str:
                done = subprocess.run(['kubectl', 'logs', status.host], capture_output=True,
                                      text=True, timeout=30)
                return done.stdout if f'hello from the {status.label}' in done.stdout else ''
            assert wait_for(logged, timeout=30, what=f'the log of {status.host}').splitlines() == [
                f'hello from the {status.label}']


PENDING = {  # Group: what keeps its pod from starting, and the reason the launch gives.
    'gpus': ({'gpus': 4}, 'Unschedulable: 0/3 nodes are available: Insufficient nvidia.com/gpu.'),
    'selector': ({'node_selector': {'pool': 'v100'}},
                 "Unschedulable: 0/3 nodes are available: 3 node(s) didn't match Pod's node "
                 "affinity/selector."),
    'image': ({'image': 'registry.invalid/none:1'}, 'ImagePullBackOff: Back-off pulling image'),
}


def test_pending_pod_is_reported_with_the_reason(cluster):
    """A pod that cannot start fails the launch with the scheduler's or kubelet's reason,
    under its node's name. One launch holds a node for each reason: each launch waits out
    the ready timeout."""
    from launchpad_py.launchers.kubernetes.launch import launch_kubernetes
    from launchpad_py.launchers.options import LaunchOptions
    program = lp.Program('pending')
    for group in PENDING:
        program.add_node(lp.PyNode(serve_forever), label=group)
    resources = {group: lp.KubernetesResources(**{'image': IMAGE, **fields})
                 for group, (fields, _) in PENDING.items()}
    launch_options = LaunchOptions(local_resources=resources, ready_timeout=2, grace=1,
                                   launcher_options=options())
    with pytest.raises(lp.LaunchError) as info:
        launch_kubernetes(program, launch_options)
    message = str(info.value)
    assert "nodes ['gpus/0', 'selector/0', 'image/0'] did not become ready within 2s" in message
    tails = dict(part.split(' ---\n', 1) for part in message.split('\n--- ')[1:])
    for name, (_, reason) in PENDING.items():
        assert reason in tails[f'{name}/0'], message
    wait_for(lambda: cluster.objects() == [], timeout=15, what='every object to be deleted')


@needs_ssh_hosts
def test_launcher_killed_leaves_no_object_and_no_process(cluster):
    """SIGKILL the launcher: nodes end at once, the lease runs out, the GC deletes everything."""
    launcher = subprocess.Popen(
        [sys.executable, os.path.join(REPO, 'tests', 'kubernetes_nodes.py'), '3'], cwd=REPO,
        stdout=subprocess.PIPE, text=True,
        env={**os.environ, 'PYTHONPATH': os.path.join(REPO, 'tests')})
    pods = launcher_report(launcher.stdout)
    assert len(pods) == 2 and len(cluster.objects()) == 5
    launcher.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    launcher.wait(timeout=10)
    launcher.stdout.close()
    wait_for(lambda: all(p['status']['phase'] == 'Failed'
                         for p in cluster.store.list('pods', 'default')[0]),
             timeout=15, what='both pods to end')
    print(f'both pods ended {time.monotonic() - killed:.2f}s after SIGKILL of the launcher')
    assert [kind for kind, _ in cluster.objects()].count('Job') == 1  # Until the lease runs out.
    wait_for(lambda: cluster.objects() == [], timeout=20, what='the lease to run out')
    print(f'no object left {time.monotonic() - killed:.2f}s after SIGKILL (lease: 3 s)')


@needs_ssh_hosts
def test_lease_is_extended_while_the_launcher_lives(cluster):
    """The root Job's deadline keeps moving while the launcher runs, so it never fails."""
    program = lp.Program('leased')
    program.add_node(lp.PyNode(serve_forever), label='waiter')
    with lp.launch(program, launch_type='kubernetes', resources=image_for_every_group(program),
                   kubernetes_options=options(lease_seconds=2)):
        def patched() -> int:
            return sum(call[:2] == ('PATCH', 'jobs') for call in cluster.server.calls)
        wait_for(lambda: patched() >= 4, timeout=30, what='four lease extensions')
        (job,), _ = cluster.store.list('jobs', 'default')
        assert job['spec']['activeDeadlineSeconds'] > 2 + 2  # Beyond its first deadline.
        assert not job['status'].get('conditions')  # Not failed: the pods still run.
        assert [p['status']['phase'] for p in cluster.store.list('pods', 'default')[0]] == [
            'Running']


@needs_ssh_hosts
def test_pod_deleted_by_someone_else_fails_the_program(cluster):
    """`kubectl delete pod` (here: the API call it makes) fails the program, naming the pod."""
    from kubernetes import client, config
    program = lp.Program('evicted')
    program.add_node(lp.PyNode(serve_forever), label='victim')
    program.add_node(lp.PyNode(serve_forever), label='bystander')
    controller = lp.launch(program, launch_type='kubernetes',
                           resources=image_for_every_group(program), kubernetes_options=options())
    (victim,) = [s.host for s in controller.statuses() if s.label == 'victim']
    config.load_kube_config(config_file=cluster.kubeconfig)
    client.CoreV1Api().delete_namespaced_pod(victim, 'default')
    with pytest.raises(lp.NodeFailedError,
                       match=rf"'victim'.*pod {victim} was deleted while the program ran"):
        controller.wait(timeout=60)
    wait_for(lambda: cluster.objects() == [], timeout=15, what='every object to be deleted')


@needs_ssh_hosts
def test_pods_killed_after_the_grace_are_deleted_together(cluster):
    """A stop kills the nodes that ignored it one after another; their pods' deletions go out
    together, not one API round trip after the other (each DELETE here is answered only once
    all three have come, or after 10 s)."""
    _stop_deaf_nodes_expecting_their_deletions_together(cluster)


@needs_ssh_hosts
def test_a_pod_whose_end_is_heard_before_its_kill_is_still_deleted_with_the_others(
        cluster, monkeypatch):
    """The kill's cut ends a node at once; a launcher that heard of its pod's end before it
    asked for the deletion took it for a pod that ended itself, deleted nothing, and left
    it to the root's cascade after the program, one by one (the test above, 1 in 8 under
    load). Forced here: each channel's first cut waits until the launcher has heard one
    more pod end. Only the first: the stop's cleanup cuts every channel once more, which
    ends nothing, and waiting for an end there ran out three 10 s timeouts (31 s in CI)."""
    from launchpad_py.launchers.kubernetes import pods
    from launchpad_py.node_side import node_process
    heard, cut_channels, unheard = set(), set(), []
    changed = threading.Condition()
    observe, cut = pods.PodStarter.observe, node_process.Channel.cut

    def observe_and_tell(starter, kind: str, pod: dict) -> None:
        observe(starter, kind, pod)
        if kind == 'DELETED' or (pod.get('status') or {}).get('phase') in ('Succeeded',
                                                                           'Failed'):
            with changed:
                heard.add(pod['metadata']['name'])
                changed.notify_all()

    def cut_and_wait_for_an_end(channel) -> None:
        cut(channel)
        with changed:
            if id(channel) in cut_channels:  # Cut before: its node has ended already.
                return
            cut_channels.add(id(channel))
            if not changed.wait_for(lambda: len(heard) >= len(cut_channels), timeout=10):
                unheard.append(len(cut_channels))

    monkeypatch.setattr(pods.PodStarter, 'observe', observe_and_tell)
    monkeypatch.setattr(node_process.Channel, 'cut', cut_and_wait_for_an_end)
    _stop_deaf_nodes_expecting_their_deletions_together(cluster)
    assert len(cut_channels) == 3 and not unheard, (
        f'no pod end heard after cuts {unheard} of {len(cut_channels)}: nothing was forced')


def _stop_deaf_nodes_expecting_their_deletions_together(cluster) -> None:
    program = lp.Program('deaf')
    for _ in range(3):
        program.add_node(lp.PyNode(ignore_stop), label='deaf')
    controller = lp.launch(program, launch_type='kubernetes',
                           resources=image_for_every_group(program), kubernetes_options=options())
    together = threading.Barrier(3, timeout=10)
    seen = []
    end_container = cluster.store.on_pod_deleted

    def answer_when_all_came(pod: dict) -> None:  # Runs in the DELETE's request thread.
        seen.append(pod['metadata']['name'])
        if len(seen) <= 3:  # Not the root Job's cascade afterwards.
            try:
                together.wait()
            except threading.BrokenBarrierError:
                pass
        end_container(pod)

    cluster.store.on_pod_deleted = answer_when_all_came
    controller.stop(grace=1, timeout=60)
    assert sorted(controller.killed_nodes) == ['deaf/0', 'deaf/1', 'deaf/2']
    assert not together.broken, f'the deletions came one at a time: {seen}'
    wait_for(lambda: cluster.objects() == [], timeout=15, what='every object to be deleted')


@needs_ssh_hosts
def test_parameter_server_example_runs_against_the_fake_api(cluster, tmp_path):
    """The parameter-server example (two replicas) runs as pods and measures its queries."""
    from examples.parameter_server.program import make_program
    result_path = tmp_path / 'result.json'
    program = make_program('replicated', num_requesters=3, duration_s=1.0,
                           result_path=str(result_path))
    controller = lp.launch(program, launch_type='kubernetes',
                           resources=image_for_every_group(program, cpu='500m', memory='512Mi'),
                           kubernetes_options=options())
    assert len(controller.statuses()) == 2 + 1 + 3 + 1
    controller.wait(timeout=120)
    result = json.loads(result_path.read_text())
    assert result['num_requesters'] == 3 and result['queries'] > 0
    assert result['newest_version'] > 0  # The writer moved the parameters meanwhile.
    wait_for(lambda: cluster.objects() == [], timeout=15, what='every object to be deleted')


def _granted_by_the_documented_role() -> set[tuple[str, str]]:
    """(resource, verb) pairs of the Role in docs/launchers.md."""
    import yaml
    with open(os.path.join(REPO, 'docs', 'launchers.md')) as doc:
        text = doc.read()
    block = text.split('### RBAC')[1].split('```yaml\n')[1].split('```')[0]
    role = yaml.safe_load(block)
    kubernetes_validate = pytest.importorskip('kubernetes_validate')
    kubernetes_validate.validate(role, '1.29.0', strict=True)
    return {(resource, verb) for rule in role['rules'] for resource in rule['resources']
            for verb in rule['verbs']}


@needs_ssh_hosts
def test_documented_rbac_role_is_exactly_what_the_launcher_uses(cluster):
    """Every call a launch makes (lease, logs, a node added and removed from its elastic
    group, a pod killed after its grace) and no more."""
    program = lp.Program('rbac')
    with program.group('deaf', elastic=True):
        program.add_node(lp.PyNode(ignore_stop))
    controller = lp.launch(program, launch_type='kubernetes',
                           resources=image_for_every_group(program),
                           kubernetes_options=options(lease_seconds=2))
    wait_for(lambda: ('PATCH', 'jobs', True, False, False) in cluster.server.calls, timeout=30,
             what='a lease extension')
    controller.add_nodes('deaf', 1, timeout=60)
    controller.remove_nodes('deaf', 1, grace=0.5, timeout=60)  # Its pod and Secret go.
    controller.stop(grace=1, timeout=60)
    assert 'deaf/0' in controller.killed_nodes
    verbs = {'POST': 'create', 'PATCH': 'patch', 'DELETE': 'delete'}
    used = set()
    for method, resource, named, log, watch in cluster.server.calls:
        verb = verbs.get(method) or ('watch' if watch else 'get' if named else 'list')
        used.add(('pods/log' if log else resource, verb))
    assert used == _granted_by_the_documented_role()


@needs_ssh_hosts
def test_output_to_files_keeps_each_pod_log(cluster, capsys):
    """terminal='output_to_files' writes each pod's log, and why it waited, to a file here."""
    program = lp.Program('filed')
    program.add_node(lp.PyNode(print_and_wait, 'written to a file'), label='writer')
    with lp.launch(program, launch_type='kubernetes', resources=image_for_every_group(program),
                   kubernetes_options=options(), terminal='output_to_files') as controller:
        (pod,) = [s.host for s in controller.statuses()]
        (path,) = [line.split(': ', 1)[1] for line in capsys.readouterr().out.splitlines()
                   if line.startswith(f'  writer/0 ({pod}): ')]

        def logged() -> bool:
            with open(path) as log:
                return 'written to a file' in log.read()

        wait_for(logged, timeout=30, what='the pod log in its file')
    assert os.path.exists(path)


@needs_ssh_hosts
def test_launcher_address_defaults_to_the_route_to_the_api_server(tmp_path, monkeypatch):
    """Pods dial back to this machine's address on the route to the API server (here h2)."""
    from launchpad_py.launchers.kubernetes.api import Cluster
    kubeconfig = tmp_path / 'kubeconfig'
    kubeconfig.write_text(json.dumps({
        'apiVersion': 'v1', 'kind': 'Config', 'current-context': 'c',
        'clusters': [{'name': 'c', 'cluster': {'server': 'https://10.250.0.12:6443'}}],
        'users': [{'name': 'u', 'user': {'token': 't'}}],
        'contexts': [{'name': 'c', 'context': {'cluster': 'c', 'user': 'u'}}]}))
    monkeypatch.setenv('KUBECONFIG', str(kubeconfig))
    cluster = Cluster('default')
    try:
        assert cluster.route_address() == '10.250.0.1'  # Found without sending anything.
    finally:
        cluster.close()


def test_deletions_asked_for_before_the_finish_all_go_out():
    """A stop's last stragglers were asked to be deleted just before the program ended;
    ``finish`` cancelled the queued ones with the queued creates, so the root's cascade
    deleted those pods one by one after the program (the deletion test above, 1 in 8 under
    load). One deletion pool thread held here: the two queued behind it must still run."""
    from launchpad_py.launchers.kubernetes import manifests, pods

    class ApiServer:  # Only what Deployment.finish and delete_soon use of the cluster.
        def __init__(self):
            self.deleted, self.first_came, self.release = [], threading.Event(), threading.Event()

        def delete_pod(self, pod: str) -> None:
            self.first_came.set()
            self.release.wait(30)
            self.deleted.append(pod)

        def close(self) -> None:
            pass

    api = ApiServer()
    deployment = pods.Deployment(api, manifests.Names('deaf', [('deaf', 3)]), render=None,
                                 lease_seconds=30, create_concurrency=1)
    for index in range(3):
        deployment.delete_soon(f'pod-{index}')
    assert api.first_came.wait(30)
    finishing = threading.Thread(target=deployment.finish)
    finishing.start()
    wait_for(lambda: deployment.finished, timeout=30, what='finish to begin')
    api.release.set()
    finishing.join(30)
    assert not finishing.is_alive()
    assert sorted(api.deleted) == ['pod-0', 'pod-1', 'pod-2']
