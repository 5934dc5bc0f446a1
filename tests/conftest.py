"""Shared fixtures: every test must leave no node threads and no processes behind."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings

import psutil
import pytest

LAUNCH_TYPES = ['local_mt', 'local_mp', 'test_mt', 'test_mp']
# The SSH launcher's tests use the namespace hosts of ../shared/infra/ssh_hosts.sh (needs root).
SSH_DIR = os.environ.get('LP_SSH_DIR', '/tmp/lp-ssh')
SSH_OPTIONS = ['-F', os.path.join(SSH_DIR, 'ssh_config')]
SSH_HOST_NAMES = ['h1', 'h2', 'h3']
needs_ssh_hosts = pytest.mark.skipif(
    os.geteuid() != 0, reason='SSH launcher tests need root to run sshd in network namespaces '
                              '(../shared/infra/ssh_hosts.sh up)')
# Share-nothing hosts p1..p3 of scripts/private_hosts.sh: the same namespaces, a second sshd
# with its own /tmp, /home, /root and python (/opt/lp/env); the checkout is hidden there.
PRIVATE_DIR = os.environ.get('LP_PRIVATE_DIR', '/tmp/lp-private')
PRIVATE_PYTHON = '/opt/lp/env/bin/python'
# LP_SSH_TEST_HOSTS=p runs the ssh suites' hosts h1..h3 on p1..p3, shipping the tests' code.
_SSH_ON_PRIVATE = os.environ.get('LP_SSH_TEST_HOSTS') == 'p'
# The Slurm launcher's tests use the cluster of scripts/slurm_cluster.sh on those hosts (root).
SLURM_DIR = os.environ.get('LP_SLURM_DIR', '/tmp/lp-slurm')
os.environ.setdefault('SLURM_CONF', os.path.join(SLURM_DIR, 'slurm.conf'))
needs_slurm = pytest.mark.skipif(
    os.geteuid() != 0, reason='Slurm launcher tests need root to run slurmd in network namespaces '
                              '(bash scripts/slurm_cluster.sh up)')
# Runs that take long by design (heartbeat timeouts, examples across hosts, fault runs).
slow = pytest.mark.skipif(os.environ.get('LP_SLOW_TESTS') != '1',
                          reason='slow run; set LP_SLOW_TESTS=1 to include it')
# The Kubernetes launcher runs against a fake API server (tests/fake_kube) whose pods run on
# the namespace hosts; it needs the [kubernetes] extra.
needs_kubernetes_client = pytest.mark.skipif(
    importlib.util.find_spec('kubernetes') is None,
    reason="the [kubernetes] extra is not installed (pip install 'launchpad_py[kubernetes]')")
# The Ray launcher's tests use only the cluster of scripts/ray_cluster.sh (head here, workers
# on h1..h3), found through the address file it writes; never a cluster of the user's.
RAY_DIR = os.environ.get('LP_RAY_DIR', '/tmp/lp-ray')
needs_ray = pytest.mark.skipif(importlib.util.find_spec('ray') is None,
                               reason="the [ray] extra is not installed "
                                      "(pip install 'launchpad_py[ray]')")
# Every launcher the conformance suite covers.
ALL_LAUNCH_TYPES = LAUNCH_TYPES + [
    pytest.param('ssh', marks=needs_ssh_hosts),
    pytest.param('slurm', marks=needs_slurm),
    pytest.param('kubernetes', marks=[needs_ssh_hosts, needs_kubernetes_client]),
    pytest.param('ray', marks=needs_ray)]
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SLURM_LOGS = os.path.join(tempfile.gettempdir(), 'lp-slurm-test-logs')
# Threads the library starts for a program; long-lived gRPC/channel threads are not ours.
_OURS = ('lp-', 'courier-')
# dm-reverb pins TensorFlow and numpy<2, so its tests run in .venv-reverb (scripts/test.sh does that).
_HAS_REVERB = importlib.util.find_spec('reverb') is not None
collect_ignore = [] if _HAS_REVERB else ['reverb_tests']


def pytest_report_header():
    if not _HAS_REVERB:
        return ('tests/reverb_tests not collected: dm-reverb is not installed in this environment; '
                'scripts/test.sh runs them in .venv-reverb')


def _our_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith(_OURS)}


@contextlib.contextmanager
def leaves_nothing_running():
    """Fails if the block leaves library threads or child processes running."""
    threads_before = _our_threads()
    children_before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    for thread in _our_threads() - threads_before:
        thread.join(timeout=15)
    leaked_threads = [t.name for t in _our_threads() - threads_before if t.is_alive()]
    children = [p for p in psutil.Process().children(recursive=True)
                if p.pid not in children_before]
    _, alive = psutil.wait_procs(children, timeout=15)
    for process in alive:
        process.kill()
    assert not leaked_threads, f'threads left running: {leaked_threads}'
    assert not alive, f'processes left running: {[p.cmdline() for p in alive]}'


@pytest.fixture(autouse=True)
def no_leaks():
    """Fails the test if it leaves library threads or child processes running."""
    with leaves_nothing_running():
        yield


class _GraceKills(logging.Handler):
    """Collects the supervisor's "killed ... after the grace period" reports of this process."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.kills: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg == 'program %r: killed %s after the %.0fs grace period':
            name, killed, grace = record.args
            if grace >= _default_grace():
                self.kills.append(f'program {name!r}: {killed}')


def _default_grace() -> float:
    from launchpad_py import flags
    return flags.TERMINATION_NOTICE_SECS.default


@pytest.fixture(autouse=True)
def no_default_grace_wait():
    """Warns when a test's program killed a node only after the default grace period (10 s).

    The test then sat through those seconds for nothing: a test node should heed the
    stop (``lp.stop_event()``, a stop handler), and a test of the kill should give a
    short grace. A warning, not a failure: the suite's time, not behaviour.
    """
    handler = _GraceKills()
    logger = logging.getLogger('launchpad_py.supervision.controller')
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
    for kill in handler.kills:
        warnings.warn(pytest.PytestWarning(
            f'{kill} ignored the stop and was killed after the default {_default_grace():.0f}s '
            'grace period, which the test waited out: make the node heed the stop, or give '
            'the program a short grace where the kill is what the test checks'))


def private_host(name: str, **options):
    """``lp.SshHost`` for a share-nothing host (p1..p3) running its own python, with the code
    shipped; skips, saying how to bring them up, when they are not."""
    import launchpad_py as lp
    config = os.path.join(PRIVATE_DIR, 'ssh_config')
    if not os.path.exists(config):
        pytest.skip(f'the share-nothing test hosts are not up (no {config}): '
                    '`bash scripts/private_hosts.sh up` (as root, after ssh_hosts.sh)')
    options.setdefault('python', PRIVATE_PYTHON)
    options.setdefault('ship_code', True)
    return lp.SshHost(name, ssh_options=['-F', config], **options)


def host_name(name: str) -> str:
    """The name statuses and messages give the test host ``name`` (h1..h3: p1..p3 with
    ``LP_SSH_TEST_HOSTS=p``)."""
    return 'p' + name[1:] if _SSH_ON_PRIVATE and re.fullmatch(r'h[123]', name) else name


def read_on_host(host: str, path: str) -> str:
    """The text of ``path`` as the test host ``host`` sees it: read here for hosts sharing
    this filesystem, over ssh for the share-nothing p1..p3."""
    if not re.fullmatch(r'p[123]', host):
        with open(path) as f:
            return f.read()
    done = subprocess.run(['ssh', '-F', os.path.join(PRIVATE_DIR, 'ssh_config'), host,
                           f'cat {shlex.quote(path)}'], capture_output=True, text=True,
                          timeout=60)
    if done.returncode != 0:
        raise FileNotFoundError(f'{path} on {host}: {done.stderr.strip()}')
    return done.stdout


def ssh_host(name: str, **options):
    """``lp.SshHost`` for one of the test hosts (h1..h3, lo); fails if they are not up.
    With ``LP_SSH_TEST_HOSTS=p``, h1..h3 are the share-nothing p1..p3."""
    import launchpad_py as lp
    if _SSH_ON_PRIVATE and re.fullmatch(r'h[123]', name) and 'port' not in options:
        return private_host('p' + name[1:], **options)  # (A port names the test's own sshd.)
    if not os.path.exists(SSH_OPTIONS[1]):
        pytest.fail(f'{SSH_OPTIONS[1]} is missing: bring the test hosts up with '
                    '`bash ../shared/infra/ssh_hosts.sh up` (as root)')
    return lp.SshHost(name, ssh_options=SSH_OPTIONS, **options)


def slurm_cluster() -> None:
    """Fails the test, saying how to fix it, when the Slurm test cluster is not up."""
    try:
        done = subprocess.run(['sinfo', '-h', '-p', 'debug', '-o', '%t'], capture_output=True,
                              text=True, timeout=30)
    except FileNotFoundError:
        pytest.fail('Slurm is not installed: apt-get install slurmctld slurmd slurm-client munge')
    if done.returncode != 0 or not {'idle', 'mix', 'alloc'} & set(done.stdout.split()):
        pytest.fail(f'the Slurm test cluster is not up ({done.stderr.strip() or done.stdout}): '
                    'bring it up with `bash scripts/slurm_cluster.sh up` (as root)')


def ray_cluster_is_this_checkouts() -> bool | str:
    """True if the test Ray cluster was started from this checkout's .venv (its workers then
    import this checkout's launchpad_py); else the Ray it was started from."""
    try:
        with open(os.path.join(RAY_DIR, 'ray_bin')) as ray_bin_file:
            ray_bin = ray_bin_file.read().strip()
    except OSError:
        return '(unknown: no ray_bin)'
    ours = os.path.join(REPO, '.venv', 'bin', 'ray')
    return True if os.path.realpath(ray_bin) == os.path.realpath(ours) else ray_bin


def ray_address() -> str:
    """The address of the test Ray cluster (scripts/ray_cluster.sh); skips, saying why, if down."""
    try:
        with open(os.path.join(RAY_DIR, 'address')) as address_file:
            address = address_file.read().strip()
    except OSError:
        pytest.skip(f'the test Ray cluster is not up (no {RAY_DIR}/address): bring it up with '
                    '`bash scripts/ray_cluster.sh up` (as root, after the namespace hosts)')
    ours = ray_cluster_is_this_checkouts()
    if ours is not True:
        pytest.skip(f'the test Ray cluster runs from another checkout ({ours}), so its actors '
                    "would run that checkout's code: `bash scripts/ray_cluster.sh up` from this "
                    'one starts it afresh')
    host, _, port = address.rpartition(':')
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        pytest.skip(f'the test Ray cluster at {address} does not answer ({exc}): '
                    '`bash scripts/ray_cluster.sh up` (as root)')
    return address


@pytest.fixture
def ray_cluster() -> str:
    """The address of the test Ray cluster, the only one Ray tests use; skips, saying why, if down."""
    return ray_address()


@contextlib.contextmanager
def _fake_kubernetes_cluster(directory: str, monkeypatch: pytest.MonkeyPatch):
    from fake_kube import FakeCluster, FakeNode
    nodes = [FakeNode('h1', netns='lp-h1'), FakeNode('h2', netns='lp-h2'),
             FakeNode('h3', labels={'pool': 'a100'}, gpus=2, netns='lp-h3')]
    with FakeCluster(directory, nodes) as fake:
        monkeypatch.setenv('KUBECONFIG', fake.kubeconfig)
        yield fake


@pytest.fixture
def kubernetes_cluster(tmp_path, monkeypatch):
    """A fake cluster (KUBECONFIG points at it) with nodes h1..h3; h3 has GPUs and pool=a100."""
    with _fake_kubernetes_cluster(str(tmp_path), monkeypatch) as fake:
        yield fake


@pytest.fixture(scope='module')
def module_kubernetes_cluster(tmp_path_factory):
    """The same fake cluster, shared by the tests of a module that launch one program after
    another into it (a fresh one per test costs its start and its stop each time)."""
    with pytest.MonkeyPatch.context() as monkeypatch, _fake_kubernetes_cluster(
            str(tmp_path_factory.mktemp('kubernetes')), monkeypatch) as fake:
        yield fake


def launch(program, launch_type: str, **kwargs):
    """``lp.launch``; for ssh, group number i runs on host h(i mod 3 + 1); slurm logs go to /tmp;
    ray runs on the test Ray cluster (``ray_address``).

    For kubernetes (with the ``kubernetes_cluster`` fixture): every group runs the fake's image.
    """
    import launchpad_py as lp
    if launch_type == 'ssh' and 'resources' not in kwargs:
        kwargs['resources'] = {group: ssh_host(SSH_HOST_NAMES[i % len(SSH_HOST_NAMES)])
                               for i, group in enumerate(program.groups)}
    if launch_type == 'slurm':
        slurm_cluster()
        kwargs.setdefault('slurm_options', {'output_dir': SLURM_LOGS})
    if launch_type == 'kubernetes':
        from kubernetes_nodes import image_for_every_group, options
        kwargs.setdefault('resources', image_for_every_group(program))
        kwargs.setdefault('kubernetes_options', options())
    if launch_type == 'ray':
        kwargs.setdefault('ray_options', {'address': ray_address()})
    return lp.launch(program, launch_type=launch_type, **kwargs)


def run_script(source: str, *args: str, timeout: float = 90, **kwargs) -> subprocess.CompletedProcess:
    """Runs ``source`` as a launching script in a fresh interpreter."""
    return subprocess.run([sys.executable, '-c', source, *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, **kwargs)


def marked_processes(token: str) -> list[psutil.Process]:
    """Every process (on any namespace host) whose command line or environment holds ``token``.

    The namespace hosts share this process table, so a launch's processes on every
    host are found here when its nodes get ``LP_TEST_TOKEN=token``.
    """
    found = []
    for process in psutil.process_iter():
        try:
            if process.pid != os.getpid() and (
                    token in ' '.join(process.cmdline())
                    or process.environ().get('LP_TEST_TOKEN') == token):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


def launcher_report(stream):
    """The JSON a launching script prints once its nodes are ready, read from its ``stream``.

    Lines before it (the launcher's own, or nodes' early output, prefixed
    ``[label/index]``) are skipped; fails if the script ends first.
    """
    for line in stream:
        if not re.match(r'(\[[^\]/\s]+/\d+\] |launchpad_py: )', line):
            return json.loads(line)
    raise AssertionError('the launcher ended before its nodes were ready')


def wait_for_node_line(controller, node: str, prefix: str, timeout: float = 60) -> str:
    """The first line of ``node``'s output that starts with ``prefix``, once it has arrived.

    Reads the controller's tail of the node's output, never the captured terminal:
    polling capfd while nodes print loses lines, because its read and its truncate
    are two steps that a write can fall between.
    """
    def found() -> str | None:
        return next((line for line in controller.output_tail(node).splitlines()
                     if line.startswith(prefix)), None)

    return wait_for(found, timeout, what=f'{node} to print a line starting with {prefix!r}')


def wait_for(predicate, timeout: float = 30, what: str = 'condition'):
    """Re-checks ``predicate`` until it returns a truthy value or ``timeout`` passes.

    For conditions no event announces (a file appearing, output arriving); the
    checks are spaced by an Event wait, and the test fails when time runs out.
    """
    pause = threading.Event()
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f'timed out after {timeout}s waiting for {what}')
        pause.wait(0.02)
