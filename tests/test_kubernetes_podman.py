"""The Kubernetes launcher's pods really run: podman plays them as the launcher created them.

Opt-in (slow, needs root and podman): ``LP_K8S_PODMAN=1``. ``.ci/k8s_podman``
runs it when the files that determine the pods changed since the last green
run (docs/launchers.md). The launcher talks to the fake API server
(``fake_kube``) through the official client, as in test_kubernetes.py; the
fake kubelet hands each pod to ``podman kube play`` (runc, explicit ulimits,
in a network-namespace host; see ``fake_kube/runtimes.py`` for the few
adaptations podman 4.3 needs). The image is ``lp-base`` (Debian's python3,
from ../shared/infra/podman.sh) plus wheels of launchpad_py's dependencies
and this repository's code.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys

import pytest

import launchpad_py as lp
from conftest import REPO, needs_kubernetes_client, needs_ssh_hosts, wait_for
from fake_kube import FakeCluster, FakeNode
from fake_kube.runtimes import PodmanRuntime, podman
from kubernetes_nodes import Movable, PeerCaller, options, print_then_crash

pytestmark = [
    needs_ssh_hosts, needs_kubernetes_client,
    pytest.mark.skipif(os.environ.get('LP_K8S_PODMAN') != '1',
                       reason='slow podman run; set LP_K8S_PODMAN=1 (.ci/k8s_podman does)'),
    pytest.mark.timeout(600),
]
BASE = 'localhost/lp-base:latest'
DEPENDENCIES = ['grpcio', 'cloudpickle', 'portpicker', 'absl-py', 'numpy', 'psutil']
CONTAINERFILE = f'''FROM {BASE}
COPY wheels /wheels
RUN python3 -m venv /opt/lp && /opt/lp/bin/pip install -q --no-index /wheels/*.whl && rm -r /wheels
COPY app /app
ENV PATH=/opt/lp/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ENV PYTHONPATH=/app:/app/tests
WORKDIR /app
'''


def _code_files() -> list[str]:
    listed = subprocess.run(['git', 'ls-files', '--cached', '--others', '--exclude-standard',
                             'launchpad_py', 'examples', 'tests'], cwd=REPO, capture_output=True,
                            text=True, check=True).stdout.split()
    return sorted(f for f in listed if f.endswith('.py') and os.path.exists(os.path.join(REPO, f)))


def _build_image(context: str) -> str:
    """The test image, tagged with a hash of what goes in; built only when that changed."""
    pins = [f'{name}=={importlib.metadata.version(name)}' for name in DEPENDENCIES]
    files = _code_files()
    digest = hashlib.sha256(CONTAINERFILE.encode() + ' '.join(pins).encode())
    for path in files:
        with open(os.path.join(REPO, path), 'rb') as source:
            digest.update(path.encode() + source.read())
    tag = f'localhost/lp-k8s-test:{digest.hexdigest()[:16]}'
    if podman('image', 'exists', tag, check=False).returncode == 0:
        return tag
    if podman('image', 'exists', BASE, check=False).returncode != 0:
        pytest.fail(f'{BASE} is missing: make it with `bash ../shared/infra/podman.sh image`')
    subprocess.run([sys.executable, '-m', 'pip', 'download', '-q', '--only-binary=:all:',
                    '-d', os.path.join(context, 'wheels'), *pins], check=True, timeout=600)
    for path in files:
        os.makedirs(os.path.dirname(os.path.join(context, 'app', path)), exist_ok=True)
        shutil.copy(os.path.join(REPO, path), os.path.join(context, 'app', path))
    with open(os.path.join(context, 'Containerfile'), 'w') as out:
        out.write(CONTAINERFILE)
    # No network while building: podman's default network would turn on IP forwarding.
    podman('build', '--network', 'none', '-q', '-t', tag, context, timeout=600)
    older = podman('images', '--filter', 'reference=localhost/lp-k8s-test', '--format',
                   '{{.Repository}}:{{.Tag}}').stdout.split()
    for stale in set(older) - {tag}:  # Images of earlier code: one is enough to keep.
        podman('rmi', stale, check=False)
    return tag


@pytest.fixture(scope='module')
def image(tmp_path_factory):
    conf = tmp_path_factory.mktemp('podman') / 'containers.conf'
    conf.write_text('[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]\n'
                    '[engine]\nruntime = "runc"\n')  # crun fails on these hybrid-cgroup hosts.
    previous = os.environ.get('CONTAINERS_CONF')
    os.environ['CONTAINERS_CONF'] = str(conf)
    yield _build_image(str(tmp_path_factory.mktemp('context')))
    if previous is None:
        os.environ.pop('CONTAINERS_CONF')
    else:
        os.environ['CONTAINERS_CONF'] = previous


@pytest.fixture
def cluster(image, tmp_path, monkeypatch):
    nodes = [FakeNode(f'h{i}', netns=f'lp-h{i}') for i in (1, 2, 3)]
    with FakeCluster(str(tmp_path), nodes, images=(image,), runtime=PodmanRuntime()) as fake:
        monkeypatch.setenv('KUBECONFIG', fake.kubeconfig)
        yield fake


def _podman_pods(program_label: str) -> list[str]:
    listed = podman('pod', 'ps', '--filter', f'label=launchpad-py/program={program_label}',
                    '--format', '{{.Name}}')
    return listed.stdout.split()


def test_parameter_server_example_runs_as_podman_pods(cluster, image, capfd):
    """The example's 7 pods start under podman, serve each other, measure and end; none is left."""
    from examples.parameter_server.program import make_program
    program = make_program('replicated', num_requesters=3, duration_s=2.0)
    resources = {group: lp.KubernetesResources(image=image, cpu='250m', memory='512Mi',
                                               memory_limit='1Gi') for group in program.groups}
    controller = lp.launch(program, launch_type='kubernetes', resources=resources,
                           kubernetes_options=options())
    pods = [s.host for s in controller.statuses()]
    label = pods[0].rsplit('-', 2)[0]
    assert sorted(_podman_pods(label)) == sorted(pods)
    controller.wait(timeout=300)
    lines = [line for line in capfd.readouterr().out.splitlines()
             if line.startswith('[meter/0] meter: 3 requesters, ')]
    assert lines and 'queries/s in total' in lines[0], 'the meter reported no measurement'
    wait_for(lambda: cluster.objects() == [] and not _podman_pods(label), timeout=60,
             what='every object and podman pod to go')


def test_crashed_container_under_podman_fails_wait_with_its_log(cluster, image):
    """A container that dies hard under podman fails wait() with its exit code and its log."""
    program = lp.Program('podcrash')
    program.add_node(lp.PyNode(print_then_crash, 5), label='crasher')
    controller = lp.launch(program, launch_type='kubernetes',
                           resources={'crasher': lp.KubernetesResources(image=image)},
                           kubernetes_options=options())
    with pytest.raises(lp.NodeFailedError, match=r'exited with code 5') as info:
        controller.wait(timeout=120)
    assert 'about to crash hard' in info.value.remote_traceback
    wait_for(lambda: cluster.objects() == [], timeout=60, what='every object to go')


def test_crashed_pod_under_podman_restarts_as_a_new_pod_its_peer_reaches(cluster, image):
    """Under lp.Restart a podman pod whose process dies comes back as pod -r1 at a new
    address (its host cordoned: on h2); a peer pod loses one call at most, then reaches it."""
    from launchpad_py import courier
    program = lp.Program('podmove')
    movable = program.add_node(lp.CourierNode(Movable), label='movable')
    caller = program.add_node(lp.CourierNode(PeerCaller, movable), label='caller')
    resources = {group: lp.KubernetesResources(image=image) for group in program.groups}
    with lp.launch(program, launch_type='kubernetes', resources=resources,
                   kubernetes_options=options(),
                   failure_policy={'movable': lp.Restart(max_restarts=1, backoff=(0.1, 0.1))}
                   ) as controller:
        status = lambda: next(s for s in controller.statuses() if s.label == 'movable')
        first_pod, first_address = status().host, movable.address.resolve()
        peer = caller.dereference()
        assert peer.peer_who()['lost'] == 0
        cluster.kubelet.nodes[0].cordoned = True
        with pytest.raises(courier.CourierUnavailableError):
            movable.dereference().crash()
        wait_for(lambda: (status().state, status().restarts) == (lp.NodeState.RUNNING, 1),
                 timeout=120, what='the new pod')
        assert status().host == f'{first_pod}-r1' and movable.address.resolve() != first_address
        answer = peer.peer_who()
        assert answer['lost'] <= 1 and answer['who']['name'] == 'movable/0'
        label = first_pod.rsplit('-', 2)[0]
    wait_for(lambda: cluster.objects() == [] and not _podman_pods(label), timeout=60,
             what='every object and podman pod to go')


def test_packed_podman_pods_serve_restart_a_node_inside_and_stop_clean(cluster, image):
    """4 nodes at 2 per pod are 2 podman pods whose agents dialed back; a node that dies
    restarts alone inside its pod; stop leaves no object and no podman pod."""
    from launchpad_py import courier
    program = lp.Program('podpack')
    with program.group('movable'):
        handles = [program.add_node(lp.CourierNode(Movable)) for _ in range(4)]
    with lp.launch(program, launch_type='kubernetes',
                   resources={'movable': lp.KubernetesResources(image=image, nodes_per_pod=2)},
                   kubernetes_options=options(),
                   failure_policy={'movable': lp.Restart(max_restarts=1, backoff=(0.1, 0.1))}
                   ) as controller:
        pods = sorted({s.host for s in controller.statuses()})
        label = pods[0].rsplit('-', 2)[0]
        assert len(pods) == 2 and sorted(_podman_pods(label)) == pods
        assert [h.dereference().who()['name'] for h in handles] == [
            f'movable/{i}' for i in range(4)]
        with pytest.raises(courier.CourierUnavailableError):
            handles[3].dereference().crash()
        status = lambda: next(s for s in controller.statuses() if s.index == 3)
        wait_for(lambda: (status().state, status().restarts) == (lp.NodeState.RUNNING, 1),
                 timeout=120, what='movable/3 back in its pod')
        assert status().host == pods[1] and sorted(_podman_pods(label)) == pods
        assert handles[3].dereference().who()['name'] == 'movable/3'
    wait_for(lambda: cluster.objects() == [] and not _podman_pods(label), timeout=60,
             what='every object and podman pod to go')
