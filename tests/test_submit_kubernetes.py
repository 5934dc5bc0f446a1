"""Submitted programs on Kubernetes (issue 27): the controller in a Job's pod, and walk away.

The manifests are checked with kubernetes-validate --strict; the runs use the
fake API server (``fake_kube``) over real HTTP, whose kubelet runs the
controller pod and the node pods as real local processes, and the CLI runs as
a user runs it, from processes of its own.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys

import pytest
import yaml

import launchpad_py as lp
from conftest import REPO, wait_for
from launchpad_py.submission import records
from launchpad_py.submission.platforms import kubernetes_objects
from launchpad_py.submission.submitted import submitted_programs
from test_submit import cli

pytest.importorskip('kubernetes', reason="the [kubernetes] extra is not installed "
                                         "(pip install 'launchpad_py[kubernetes]')")
SCRIPT = os.path.join(REPO, 'tests', 'submit_k8s_script.py')
VERSIONS = ['1.29.0', '1.33.0']


@pytest.fixture(autouse=True)
def programs_dir(tmp_path, monkeypatch):
    """Each test keeps its program records in a directory of its own."""
    path = tmp_path / 'programs'
    monkeypatch.setenv(records.DIR_ENV, str(path))
    yield path


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    """A fake cluster whose one node runs pods in this network namespace (the API's)."""
    from fake_kube import FakeCluster, FakeNode
    (tmp_path / 'kube').mkdir()
    with FakeCluster(str(tmp_path / 'kube'), [FakeNode('local')]) as fake:
        monkeypatch.setenv('KUBECONFIG', fake.kubeconfig)
        yield fake
        for program in submitted_programs():  # A failed test's program must not run on.
            if program.state() in ('pending', 'running'):
                program.stop(grace=0, timeout=30)


def submit(*args: str) -> lp.SubmittedProgram:
    from fake_kube import IMAGE
    done = cli('submit', '--launch_type', 'kubernetes', '--image', IMAGE, '--name', 'ticker',
               *args)
    assert done.returncode == 0, done.stderr
    return lp.attach(done.stdout.strip())


def ticks(program) -> int:
    return program.logs(node='worker/0', grep=r'^\[worker/0\] tick ').count('\n')


def pods(cluster, phase: str | None = None) -> list[dict]:
    items, _ = cluster.store.list('pods', None)
    return [p for p in items if phase in (None, (p.get('status') or {}).get('phase'))]


def processes_left(cluster) -> list:
    """The pods' processes the fake kubelet started that have not ended."""
    return [key for key, ended in cluster.kubelet._ended.items() if not ended.is_set()]


@pytest.mark.parametrize('version', VERSIONS)
def test_dry_run_prints_every_manifest_and_each_validates_strictly(version, tmp_path):
    """--dry_run: ServiceAccount, Role, RoleBinding, Secret, Job as YAML; nothing applied."""
    kubernetes_validate = pytest.importorskip('kubernetes_validate')
    done = cli('submit', '--launch_type', 'kubernetes', '--image', 'registry.example/a:1',
               '--namespace', 'research', '--controller_restarts', '2', '--dry_run', SCRIPT,
               'ticker')
    assert done.returncode == 0, done.stderr
    documents = list(yaml.safe_load_all(done.stdout))
    assert [d['kind'] for d in documents] == ['ServiceAccount', 'Role', 'RoleBinding', 'Secret',
                                              'Job']
    for document in documents:
        kubernetes_validate.validate(document, version, strict=True)
    role, secret, job = documents[1], documents[3], documents[4]
    assert {(g, r) for rule in role['rules'] for g in rule['apiGroups']
            for r in rule['resources']} == {('', 'pods'), ('', 'pods/log'), ('', 'secrets'),
                                            ('batch', 'jobs')}
    spec = job['spec']
    assert spec['backoffLimit'] == 2 and spec['template']['spec']['serviceAccountName'] == (
        job['metadata']['name'])
    container = spec['template']['spec']['containers'][0]
    assert container['command'][-2:] == ['launchpad_py.submission.controller_main', '--kubernetes']
    assert base64.b64decode(secret['data']['secret']) == b'(made when submitted)'
    script = base64.b64decode(secret['data']['script.py']).decode()
    assert script == open(SCRIPT).read()
    assert records.all_records() == []  # Nothing was recorded: nothing was submitted.


def test_a_script_too_big_for_a_secret_is_refused(tmp_path):
    """A script over the Secret's 1 MiB: a clear error, exit code 1, nothing recorded."""
    big = tmp_path / 'big.py'
    big.write_text('# ' + 'x' * (1024 * 1024) + '\n')
    done = cli('submit', '--launch_type', 'kubernetes', '--image', 'a:1', '--dry_run', str(big))
    assert done.returncode == 1
    assert "program 'big' is too big to submit to Kubernetes" in done.stderr
    assert 'at most 1048576 (1 MiB)' in done.stderr
    done = cli('submit', '--launch_type', 'kubernetes', str(big))
    assert done.returncode == 1 and "needs kubernetes_options={'image': ...}" in done.stderr
    done = cli('submit', '--image', 'a:1', str(big))
    assert done.returncode == 1 and 'are for --launch_type kubernetes' in done.stderr


def test_submitted_to_kubernetes_it_runs_on_is_listed_followed_and_stopped(cluster):
    """The submitting process returns; the controller pod runs the program (its node a pod
    owned through the controller's Job); list, status, logs -f and stop work from other
    processes, and dashboard says how to get one (it was submitted without); after stop no
    pod and no process is left."""
    program = submit(SCRIPT, 'ticker')
    assert program.launcher == 'kubernetes'
    wait_for(lambda: ticks(program) >= 3, 120, 'the node pod to tick')
    jobs, _ = cluster.store.list('jobs', 'default')
    (job,) = [j for j in jobs if j['metadata']['name'] == program.record['job']]
    (lease,) = [j for j in jobs if j is not job]  # The launch's root Job, owned by the first.
    assert [r['uid'] for r in lease['metadata']['ownerReferences']] == [job['metadata']['uid']]
    secret = records.secret_of(program.record).hex()
    for pod in pods(cluster):  # The program's secret: in no pod spec, only in Secrets.
        assert secret not in json.dumps(pod)
    listed = cli('list')
    assert any(line.split()[:4] == [program.id, 'ticker', 'kubernetes', 'running']
               and line.split()[6] == '1/1' for line in listed.stdout.splitlines()), listed
    status = cli('status', program.id)
    assert status.returncode == 0 and 'worker/0  running' in status.stdout, status
    done = cli('dashboard', program.id)
    assert done.returncode == 1 and '--lp_dashboard' in done.stderr, done
    assert cli('dashboard', program.id, '--via', 'tunnel').returncode == 2
    follower = subprocess.Popen([sys.executable, '-m', 'launchpad_py', 'logs', program.id, '-f',
                                 '--node', 'worker/0'], stdout=subprocess.PIPE, text=True)
    assert follower.stdout.readline().startswith('[worker/0] tick ')
    stopped = cli('stop', program.id, '--grace', '5')
    assert stopped.returncode == 0 and stopped.stdout.strip() == f'{program.id}: ended', stopped
    assert follower.wait(timeout=60) == 0  # -f ends with the program.
    assert program.wait(timeout=10) == 0 and cli('status', program.id).stdout.count('ended') == 1
    assert processes_left(cluster) == []
    assert [p['metadata']['name'] for p in pods(cluster)] == [
        p['metadata']['name'] for p in pods(cluster, 'Succeeded')]  # The controller's, done.
    assert len(pods(cluster)) == 1


def test_deleting_the_controllers_job_deletes_the_program(cluster):
    """The platform's kill (the Job deleted): every object goes, the node's pod included."""
    from launchpad_py.submission.platforms import kubernetes
    program = submit(SCRIPT, 'ticker')
    wait_for(lambda: ticks(program) >= 1, 120, 'the node pod to tick')
    assert len(pods(cluster, 'Running')) == 2
    kubernetes.cancel(program.record)
    wait_for(lambda: not cluster.objects() and not processes_left(cluster), 120,
             'every object and process to go')
    assert program.state() == 'lost'


def test_a_controller_killed_is_restarted_and_its_old_node_goes(cluster):
    """--controller_restarts 1: SIGKILL of the controller's process, the Job starts a new
    controller pod, which runs the program again; the old node's lease ends it."""
    program = submit('--controller_restarts', '1', SCRIPT, 'ticker', '3')
    wait_for(lambda: ticks(program) >= 1, 120, 'the node pod to tick')
    (first,) = [p['metadata']['name'] for p in pods(cluster, 'Running')
                if p['metadata']['labels'].get('job-name') == program.record['job']]
    (old_node,) = [p['metadata']['name'] for p in pods(cluster, 'Running')
                   if p['metadata']['name'] != first]
    handle = cluster.kubelet._handles[('default', first)]
    os.killpg(handle._process.pid, signal.SIGKILL)
    wait_for(lambda: program.logs().count(' controller (pid ') == 2, 120,
             'a second controller')
    wait_for(lambda: old_node not in [p['metadata']['name'] for p in pods(cluster)], 120,
             "the dead controller's node to go with its lease")
    wait_for(lambda: program.state() == 'running' and len(pods(cluster, 'Running')) == 2, 120,
             'the program to run again')
    assert program.stop(grace=5) == 'ended'
    assert processes_left(cluster) == []


def test_lp_submit_of_a_program_object_runs_it_in_the_namespace_and_waits(cluster):
    """lp.submit(program, launch_type='kubernetes'): the pickled program runs, its node's pod
    in the submission's namespace; wait() gives the exit code; the log has the node's line."""
    from fake_kube import IMAGE
    from submit_scripts import short
    program = lp.Program('short')
    program.add_node(lp.PyNode(short), label='worker')
    submitted = lp.submit(program, launch_type='kubernetes',
                          kubernetes_options={'image': IMAGE, 'namespace': 'research'},
                          resources={'worker': lp.KubernetesResources(image=IMAGE)})
    assert isinstance(submitted, lp.SubmittedProgram) and submitted.name == 'short'
    assert submitted.wait(timeout=120) == 0
    assert submitted.logs(node='worker') == '[worker/0] done\n'
    names = {(p['metadata']['namespace'], p['metadata'].get('labels', {}).get('job-name'))
             for p in pods(cluster)}
    assert names == {('research', submitted.record['job'])}  # The node's pod went, too.
    assert processes_left(cluster) == []


def test_an_api_server_away_is_a_clear_error_and_list_goes_on(tmp_path, monkeypatch):
    """No API server at the kubeconfig's address: `list` shows the program's state as unknown
    with the reason (exit 0), `status` fails with exit code 1 naming the API and the program."""
    import socket
    with socket.socket() as unused:  # A port nothing listens on.
        unused.bind(('127.0.0.1', 0))
        port = unused.getsockname()[1]
    kubeconfig = tmp_path / 'kubeconfig'
    kubeconfig.write_text(json.dumps({
        'apiVersion': 'v1', 'kind': 'Config', 'current-context': 'away',
        'clusters': [{'name': 'away', 'cluster': {'server': f'http://127.0.0.1:{port}'}}],
        'users': [{'name': 'away', 'user': {'token': 'x'}}],
        'contexts': [{'name': 'away', 'context': {'cluster': 'away', 'user': 'away'}}]}))
    monkeypatch.setenv('KUBECONFIG', str(kubeconfig))
    record = {'id': 'away-0a0b0c', 'name': 'away', 'launcher': 'kubernetes', 'started': 0,
              'job': 'away-0a0b0c', 'job_uid': 'u', 'kubernetes_options': {'image': 'a:1'}}
    record['dir'] = records.create(record, b'k' * 32)
    listed = cli('list')
    assert listed.returncode == 0 and 'unknown (the Kubernetes API at' in listed.stdout, listed
    status = cli('status', 'away-0a0b0c')
    assert status.returncode == 1
    assert f'127.0.0.1:{port} failed for program away-0a0b0c' in status.stderr, status


def test_a_pending_controller_is_stopped_by_deleting_its_job(cluster):
    """An image the cluster lacks keeps the controller pod pending: `list` and `dashboard` say
    so, and `stop` (no endpoint to ask) deletes the Job, and with it every object of the
    submission."""
    done = cli('submit', '--launch_type', 'kubernetes', '--image', 'registry.example/none:1',
               '--name', 'stuck', SCRIPT, 'ticker')
    assert done.returncode == 0, done.stderr
    program = lp.attach(done.stdout.strip())
    wait_for(lambda: pods(cluster, 'Pending'), 60, 'the controller pod to be pending')
    assert program.state() == 'pending'
    assert len(cluster.objects()) == 6  # ServiceAccount, Role, RoleBinding, Secret, Job, Pod.
    done = cli('dashboard', program.id)
    assert done.returncode == 1 and 'the controller is pending' in done.stderr, done
    stopped = cli('stop', program.id, '--timeout', '5')
    assert stopped.returncode == 0 and stopped.stdout.strip() == f'{program.id}: lost', stopped
    assert cluster.objects() == []
