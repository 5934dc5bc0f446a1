"""A submitted program whose controller pod and node pod really run, under podman.

Opt-in, as test_kubernetes_podman.py (``LP_K8S_PODMAN=1``; ``.ci/k8s_podman`` runs
both): the fake API server listens on the namespace hosts' bridge, so the
controller pod (in h1, host network) reaches it with the kubeconfig the fake
kubelet mounts for a pod with a service account. The image is
test_kubernetes_podman's plus the official Kubernetes client, which the
controller's own launch needs.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import subprocess
import sys

import pytest

import launchpad_py as lp
from conftest import REPO, needs_kubernetes_client, needs_ssh_hosts, wait_for
from fake_kube import FakeCluster, FakeNode
from fake_kube.runtimes import PodmanRuntime, podman
from kubernetes_nodes import LAUNCHER_ADDRESS
from launchpad_py.submission import records
from test_kubernetes_podman import image  # noqa: F401 (a fixture: the launcher's test image)

pytestmark = [
    needs_ssh_hosts, needs_kubernetes_client,
    pytest.mark.skipif(os.environ.get('LP_K8S_PODMAN') != '1',
                       reason='slow podman run; set LP_K8S_PODMAN=1 (.ci/k8s_podman does)'),
    pytest.mark.timeout(600),
]
SCRIPT = os.path.join(REPO, 'tests', 'submit_k8s_script.py')


@pytest.fixture(scope='module')
def controller_image(image, tmp_path_factory):
    """``image`` plus the kubernetes client's wheels; built once per base image and version."""
    version = importlib.metadata.version('kubernetes')
    tag = 'localhost/lp-k8s-submit:' + hashlib.sha256(
        f'{image} kubernetes=={version}'.encode()).hexdigest()[:16]
    if podman('image', 'exists', tag, check=False).returncode != 0:
        context = tmp_path_factory.mktemp('submit-context')
        subprocess.run([sys.executable, '-m', 'pip', 'download', '-q', '--only-binary=:all:',
                        '-d', str(context / 'wheels'), f'kubernetes=={version}'], check=True,
                       timeout=600)
        (context / 'Containerfile').write_text(
            f'FROM {image}\nCOPY wheels /wheels\n'
            'RUN /opt/lp/bin/pip install -q --no-index /wheels/*.whl && rm -r /wheels\n')
        podman('build', '--network', 'none', '-q', '-t', tag, str(context), timeout=600)
    older = podman('images', '--filter', 'reference=localhost/lp-k8s-submit', '--format',
                   '{{.Repository}}:{{.Tag}}').stdout.split()
    for stale in set(older) - {tag}:  # Built on earlier code: one is enough to keep.
        podman('rmi', stale, check=False)
    return tag


@pytest.fixture
def cluster(controller_image, tmp_path, monkeypatch):
    monkeypatch.setenv(records.DIR_ENV, str(tmp_path / 'programs'))
    # Each node's pods report its address on the bridge as their podIP, as a kubelet would.
    nodes = [FakeNode(f'h{i}', netns=f'lp-h{i}', pod_ip=f'10.250.0.1{i}') for i in (1, 2, 3)]
    (tmp_path / 'kube').mkdir()
    with FakeCluster(str(tmp_path / 'kube'), nodes, images=(controller_image,),
                     runtime=PodmanRuntime(), api_host=LAUNCHER_ADDRESS) as fake:
        monkeypatch.setenv('KUBECONFIG', fake.kubeconfig)
        yield fake


def test_a_submitted_program_runs_as_podman_pods_and_ends_with_its_result(
        cluster, controller_image):
    """The controller pod and its node pod run under podman; the program ends by itself with
    exit code 0, its node's line in the controller pod's log; no podman pod is left."""
    program = lp.submit(SCRIPT, 'short', launch_type='kubernetes', name='short',
                        kubernetes_options={'image': controller_image,
                                            'env': {'LP_TEST_NODE_IMAGE': controller_image}})
    assert program.wait(timeout=300) == 0, program.logs()
    assert program.state() == 'ended'
    assert '[worker/0] done\n' in program.logs(node='worker')
    played = {obj['metadata']['name'] for _, resource, _, _, obj in cluster.store._log
              if resource == 'pods'}
    assert len(played) == 2  # The controller's pod and the node's.
    wait_for(lambda: all(podman('pod', 'exists', name, check=False).returncode != 0
                         for name in played), timeout=60, what='every podman pod to go')


@pytest.mark.parametrize('via', ['direct', 'api'])
def test_the_dashboard_of_a_podman_controller_pod_is_relayed(cluster, controller_image, via):
    """The dashboard on the controller pod's loopback (h1's network) reaches this machine:
    directly over the bridge, or through the fake API server's port forward."""
    import json
    import urllib.request
    program = lp.submit(SCRIPT, 'ticker', '60', '--lp_dashboard', launch_type='kubernetes',
                        name='ticker', kubernetes_options={
                            'image': controller_image,
                            'env': {'LP_TEST_NODE_IMAGE': controller_image}})
    try:
        wait_for(lambda: ' tick ' in program.logs(node='worker/0'), 300, 'the node pod to tick')
        tunnel, url = program.open_dashboard(via=via)
        try:
            page = urllib.request.urlopen(url.replace('/?', '/api/status?'), timeout=60).read()
        finally:
            tunnel.close()
        assert json.loads(page)['program'] == 'ticker'
        assert bool(cluster.server.forwarded) == (via == 'api')
    finally:
        assert program.stop(grace=5, timeout=120) in ('ended', 'lost')
