"""The Kubernetes launcher's manifests, its dry run and its input checks; no cluster needed."""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import pytest

import launchpad_py as lp
from conftest import REPO
from launchpad_py.launchers.kubernetes.launch import Renderer
from launchpad_py.launchers.kubernetes.resources import KubernetesOptions

VERSIONS = ['1.29.0', '1.30.0', '1.31.0', '1.32.0', '1.33.0']
IMAGE = 'registry.example/team/agent:1.2'


def _parameter_server_documents(**option_fields) -> list[dict]:
    """What launching the parameter-server example would apply, GPUs and selectors included."""
    from examples.parameter_server.program import make_program
    program = make_program('replicated', num_requesters=3)
    resources = {
        'server': lp.KubernetesResources(image=IMAGE, cpu='8', memory='32Gi', gpus=1,
                                         node_selector={'pool': 'a100'}, tolerations=[
                                             {'key': 'nvidia.com/gpu', 'operator': 'Exists',
                                              'effect': 'NoSchedule'}]),
        'writer': lp.KubernetesResources(image=IMAGE, cpu=0.5, memory='1Gi', cpu_limit='1',
                                         env={'LOG_LEVEL': 'info'}, workdir='/app'),
        'requester': lp.KubernetesResources(image=IMAGE, cpu='1', memory='2Gi'),
        'meter': lp.KubernetesResources(image=IMAGE),
    }
    options = KubernetesOptions(namespace='research', **option_fields)
    renderer = Renderer(program, resources, options, grace=10)
    owner = {'apiVersion': 'batch/v1', 'kind': 'Job', 'name': renderer.names.program,
             'uid': '2f0d4b4e-0d49-4d0c-9a4e-6d7c1c3b6a11'}
    documents = [renderer.root()]
    for label, index in renderer.keys:  # As created: with the owner and a real bootstrap.
        documents += renderer.node(label, index, owner, {'control': ['10.0.0.5', 40000]})
    return documents


@pytest.mark.parametrize('version', VERSIONS)
def test_every_manifest_validates_strictly(version):
    """Job, Secrets and Pods of the parameter-server example pass kubernetes-validate --strict."""
    kubernetes_validate = pytest.importorskip('kubernetes_validate')
    documents = _parameter_server_documents(service_account='launchpad-nodes')
    assert [d['kind'] for d in documents].count('Pod') == 2 + 1 + 3 + 1
    for document in documents:
        kubernetes_validate.validate(document, version, strict=True)
    wrong = copy.deepcopy(documents[-1])  # The check can fail: a misspelt field is caught.
    wrong['spec']['containers'][0]['resource'] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong, version, strict=True)


def test_pods_carry_resources_gpus_selectors_and_the_mounted_secret():
    """Requests, limits, nvidia.com/gpu, node selector; the Secret mounted only into its pod."""
    pods = {d['metadata']['labels']['launchpad-py/node']: d
            for d in _parameter_server_documents() if d['kind'] == 'Pod'}
    server = pods['server-0']['spec']
    (container,) = server['containers']
    assert container['resources'] == {'requests': {'cpu': '8', 'memory': '32Gi'},
                                      'limits': {'memory': '32Gi', 'nvidia.com/gpu': '1'}}
    assert server['nodeSelector'] == {'pool': 'a100'}
    assert server['volumes'][0]['secret']['secretName'] == (
        pods['server-0']['metadata']['name'] + '-boot')
    writer = pods['writer-0']['spec']['containers'][0]
    assert writer['resources'] == {'requests': {'cpu': '0.5', 'memory': '1Gi'},
                                   'limits': {'cpu': '1', 'memory': '1Gi'}}
    env = {e['name']: e['value'] for e in writer['env']}
    assert env['CUDA_VISIBLE_DEVICES'] == '' and env['LOG_LEVEL'] == 'info'  # GPUs only if named.
    assert writer['workingDir'] == '/app'
    assert 'resources' not in pods['meter-0']['spec']['containers'][0]
    assert all(not p['spec']['automountServiceAccountToken'] for p in pods.values())


def test_dry_run_flag_writes_manifests_and_applies_nothing(tmp_path):
    """--lp_k8s_manifests_dir writes every manifest as YAML; no cluster is contacted."""
    yaml = pytest.importorskip('yaml')
    out = tmp_path / 'manifests'
    done = subprocess.run(
        [sys.executable, '-m', 'examples.parameter_server', '--lp_launch_type=kubernetes',
         f'--lp_k8s_image={IMAGE}', f'--lp_k8s_manifests_dir={out}'], cwd=REPO,
        capture_output=True, text=True, timeout=120,
        env={**os.environ, 'KUBECONFIG': str(tmp_path / 'no-such-kubeconfig')})
    assert done.returncode == 0, done.stderr[-3000:]
    assert f'wrote 15 manifests of \'parameter_server_single\' to {out}; nothing was applied' in (
        done.stdout)
    documents = [yaml.safe_load(path.read_text()) for path in sorted(out.iterdir())]
    assert sorted(d['kind'] for d in documents) == ['Job'] + ['Pod'] * 7 + ['Secret'] * 7
    program = {d['metadata']['labels']['launchpad-py/program'] for d in documents}
    assert len(program) == 1 and program.pop().startswith('parameter-server-single-')
    assert all(d['metadata']['namespace'] == 'default' for d in documents)


def test_dry_run_keyword_returns_an_ended_controller(tmp_path):
    """kubernetes_options={'manifests_dir': ...} does the same from code; nothing runs."""
    pytest.importorskip('yaml')
    program = lp.Program('dry')
    program.add_node(lp.PyNode(print, 'never runs'), label='printer')
    controller = lp.launch(program, launch_type='kubernetes',
                           resources={'printer': lp.KubernetesResources(image=IMAGE)},
                           kubernetes_options={'manifests_dir': str(tmp_path)})
    controller.wait(timeout=5)
    assert controller.statuses() == [] and not controller.is_running
    (job,) = [name for name in os.listdir(tmp_path) if name.startswith('job-')]
    root = job[len('job-'):-len('.yaml')]
    assert sorted(os.listdir(tmp_path)) == [job, f'pod-{root}-printer-0.yaml',
                                            f'secret-{root}-printer-0-boot.yaml']


@pytest.mark.parametrize('make, message', [
    (lambda: lp.KubernetesResources(image=''), "image must name an image such as"),
    (lambda: lp.KubernetesResources(image=IMAGE, cpu='8 cores'),
     r"cpu must be a Kubernetes quantity such as '500m'.*\(got '8 cores'\)"),
    (lambda: lp.KubernetesResources(image=IMAGE, memory='32GB'),
     r"memory must be a Kubernetes quantity.*\(got '32GB'\)"),
    (lambda: lp.KubernetesResources(image=IMAGE, gpus=-1), r'gpus must be a whole number'),
    (lambda: lp.KubernetesResources(image=IMAGE, node_selector={'pool': 'a 100'}),
     r'node_selector must map label names to label values'),
    (lambda: lp.KubernetesResources(image=IMAGE, env={'1X': 'y'}), r'env must map variable'),
    (lambda: KubernetesOptions(namespace='Research'), r"'namespace' must be a Kubernetes name"),
    (lambda: KubernetesOptions(lease_seconds=1), r"'lease_seconds' must be .* 2 or more"),
    (lambda: KubernetesOptions.from_mapping({'namespce': 'x'}), r"unknown keys \['namespce'\]"),
])
def test_bad_resources_and_options_are_named(make, message):
    """Each bad field names itself, the bad value and what is expected."""
    with pytest.raises((TypeError, ValueError), match=message):
        make()


def test_group_without_image_and_options_for_another_launcher_are_errors(tmp_path):
    """A group without an image, or with another launcher's resources, is named; and
    kubernetes_options under ssh is refused."""
    program = lp.Program('imageless')
    program.add_node(lp.PyNode(print), label='placed')
    program.add_node(lp.PyNode(print), label='forgotten')
    with pytest.raises(lp.ResourcesError, match="group 'forgotten' has no image"):
        lp.launch(program, launch_type='kubernetes',
                  resources={'placed': lp.KubernetesResources(image=IMAGE)},
                  kubernetes_options={'manifests_dir': str(tmp_path)})
    with pytest.raises(lp.ResourcesError, match=r"resources\['placed'\] must be "
                                                r"lp.KubernetesResources\(...\) for kubernetes"):
        lp.launch(program, launch_type='kubernetes', resources={'placed': lp.PythonProcess()},
                  kubernetes_options={'manifests_dir': str(tmp_path)})
    with pytest.raises(lp.ProgramError, match=r"kubernetes_options= belongs to "
                                              r"launch_type='kubernetes', but this launch is 'ssh'"):
        lp.launch(program, launch_type='ssh', kubernetes_options={'namespace': 'x'})


def test_missing_client_fails_with_the_pip_line(monkeypatch, tmp_path):
    """Without the [kubernetes] extra, a launch says which pip line installs it."""
    monkeypatch.setitem(sys.modules, 'kubernetes', None)
    program = lp.Program('clientless')
    program.add_node(lp.PyNode(print), label='printer')
    with pytest.raises(ImportError, match=r"pip install 'launchpad_py\[kubernetes\]'"):
        lp.launch(program, launch_type='kubernetes',
                  resources={'printer': lp.KubernetesResources(image=IMAGE)})
