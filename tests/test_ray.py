"""The Ray launcher on a real Ray cluster: a head here and workers on the namespace hosts h1..h3.

The cluster comes from scripts/ray_cluster.sh (CI brings it up); the ``ray_cluster``
fixture skips these tests, saying why, when it is not up. The hosts share this process table,
so the actors' and nodes' processes on every host are visible here. An elastic group, the
MapReduce example, Ray Client (``ray://``) and a launcher-started local Ray are opt-in
(``LP_SLOW_TESTS=1``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

import launchpad_py as lp
from launchpad_py import courier
import conftest
from conftest import REPO, launch, marked_processes, needs_ray, slow, wait_for
from nodes_for_tests import Pinger
from ray_nodes import Caller, Where
from restart_nodes import Member, Watcher

def test_missing_ray_fails_with_the_pip_line():
    """Without ray installed, launch_type='ray' fails with the pip line that installs it."""
    source = ('import sys; sys.modules["ray"] = None\n'
              'import launchpad_py as lp\n'
              'from nodes_for_tests import Pinger\n'
              'p = lp.Program("noray"); p.add_node(lp.CourierNode(Pinger), label="pinger")\n'
              'lp.launch(p, launch_type="ray")\n')
    done = subprocess.run([sys.executable, '-c', source], capture_output=True, text=True,
                          timeout=60, cwd=REPO,
                          env={**os.environ, 'PYTHONPATH': os.path.join(REPO, 'tests')})
    assert done.returncode != 0
    assert "pip install 'launchpad_py[ray]'" in done.stderr


@pytest.mark.parametrize('spec, message', [
    (dict(num_cpus=-1), 'num_cpus must be a number >= 0'),
    (dict(scheduling='EVERYWHERE'), "scheduling must be one of"),
    (dict(resources={'h1': 'one'}), "resources['h1'] must be a number"),
    (dict(nodes_per_actor=0), 'nodes_per_actor must be an int >= 1'),
])
def test_bad_resources_name_the_field_and_value(spec, message):
    """A bad RayResources field is refused when it is made, naming the field and the value."""
    with pytest.raises(lp.ResourcesError, match=message.replace('[', r'\[')):
        lp.RayResources(**spec)


def test_unknown_ray_option_is_named_before_anything_starts():
    """An unknown key of ray_options fails the launch at once, listing the known keys."""
    program = lp.Program('badoption')
    program.add_node(lp.CourierNode(Pinger), label='pinger')
    with pytest.raises(lp.ResourcesError, match=r"unknown keys \['adress'\].*'address'"):
        lp.launch(program, launch_type='ray', ray_options={'adress': 'auto'})


@needs_ray
def test_resources_and_labels_place_nodes_that_call_each_other_over_courier(ray_cluster):
    """A custom resource puts one node on h1, a label selector the other on h2; they talk."""
    program = lp.Program('placed')
    where = program.add_node(lp.CourierNode(Where), label='where')
    caller = program.add_node(lp.CourierNode(Caller, where), label='caller')
    with launch(program, 'ray', resources={
            'where': lp.RayResources(resources={'h1': 1}),
            'caller': lp.RayResources(scheduling={'lp-host': 'h2'})}) as controller:
        hosts = {s.label: s.host for s in controller.statuses()}
        assert hosts == {'where': '10.250.0.11', 'caller': '10.250.0.12'}
        assert caller.dereference().ask()['host'] == '10.250.0.11'
        assert where.address.resolve().startswith('10.250.0.11:')


@needs_ray
def test_num_gpus_become_cuda_visible_devices_as_ray_assigns_them(ray_cluster):
    """Two nodes asking one GPU each get h3's two declared GPUs, one each, as Ray assigned, and
    keep JAX's preallocation; a node asking none may share its host's GPUs, so it does not."""
    program = lp.Program('gpus')
    handles = [program.add_node(lp.CourierNode(Where), label='gpu') for _ in range(2)]
    other = program.add_node(lp.CourierNode(Where), label='cpu')
    with launch(program, 'ray', resources={'gpu': lp.RayResources(num_gpus=1)}):
        seen = [h.dereference().where() for h in handles]
        cpu = other.dereference().where()
    assert {s['host'] for s in seen} == {'10.250.0.13'}
    assert sorted(s['gpus'] for s in seen) == ['0', '1']
    assert [s['preallocate'] for s in seen] == [None, None]
    assert (cpu['gpus'], cpu['preallocate']) == (None, 'false')


@needs_ray
def test_sigkill_of_launcher_leaves_no_actor_or_process_on_any_host(ray_cluster):
    """SIGKILL the launcher: every actor and node process on h1..h3 is gone within seconds."""
    import ray
    address = ray_cluster
    token = f'lp-raykill-{uuid.uuid4().hex}'
    launcher = subprocess.Popen(
        [sys.executable, os.path.join(REPO, 'tests', 'ray_nodes.py'), address, token], cwd=REPO,
        stdout=subprocess.PIPE, text=True,
        env={**os.environ, 'PYTHONPATH': os.path.join(REPO, 'tests')})
    hosts = json.loads(launcher.stdout.readline())
    assert hosts == ['10.250.0.11', '10.250.0.12', '10.250.0.13']
    assert len(marked_processes(token)) >= 6  # An actor and its node on each host.
    launcher.kill()
    launcher.wait(timeout=10)
    launcher.stdout.close()
    start = time.monotonic()
    wait_for(lambda: not marked_processes(token), timeout=30,
             what=f'the actors and nodes of {token} to end')
    print(f'every actor and node gone {time.monotonic() - start:.2f}s after SIGKILL')
    ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
    named = ray.util.list_named_actors(all_namespaces=True)
    assert not [a for a in named if f'raykill{token[-6:]}' in a['name']]


@needs_ray
def test_killed_node_is_restarted_by_lp_restart_as_a_new_actor_at_its_address(ray_cluster):
    """SIGKILL of a node under lp.Restart: handled within a second; a new actor serves at the same
    address, restarts=1."""
    program = lp.Program('rayrestart')
    handle = program.add_node(lp.CourierNode(Member), label='member')
    with launch(program, 'ray', failure_policy={
            'member': lp.Restart(max_restarts=2, backoff=(0.05, 0.2))}) as controller:
        client = handle.dereference()
        address = handle.address.resolve()
        old = client.who()['pid']
        killed = time.monotonic()
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: controller.statuses()[0].restarts == 1, timeout=30, what='the restart')
        seen = time.monotonic() - killed
        assert seen < 1.0, f'the crash was handled {seen:.2f}s after the kill'
        assert client.who()['pid'] != old
        assert handle.address.resolve() == address
        assert controller.statuses()[0].state == lp.NodeState.RUNNING
    print(f'restart seen {seen:.2f}s after the kill')


@needs_ray
def test_packed_nodes_share_actors_restart_alone_and_split_their_gpus(ray_cluster):
    """nodes_per_actor=2: four nodes in two actors, two GPU nodes in one actor with one GPU
    each; a packed node SIGKILLed under lp.Restart comes back in the same actor at its address
    while its actor-mate runs on untouched; the stop leaves no actor or node process."""
    token = f'lp-raypack-{uuid.uuid4().hex}'
    marked = {'LP_TEST_TOKEN': token}
    program = lp.Program('raypacked')
    packed = [program.add_node(lp.CourierNode(Where), label='packed') for _ in range(4)]
    gpu = [program.add_node(lp.CourierNode(Where), label='gpu') for _ in range(2)]
    with launch(program, 'ray', resources={
            'packed': lp.RayResources(resources={'h1': 1}, nodes_per_actor=2, env=marked,
                                      runtime_env={'env_vars': marked}),
            'gpu': lp.RayResources(num_gpus=1, nodes_per_actor=2)},
            failure_policy={'packed': lp.Restart(max_restarts=2, backoff=(0.05, 0.2))}
            ) as controller:
        seen = [handle.dereference().where() for handle in packed]
        assert {s['host'] for s in seen} == {'10.250.0.11'}
        actors = [s['actor_pid'] for s in seen]
        assert actors[0] == actors[1] != actors[2] == actors[3]
        on_gpus = [handle.dereference().where() for handle in gpu]
        assert on_gpus[0]['actor_pid'] == on_gpus[1]['actor_pid']
        assert sorted(s['gpus'] for s in on_gpus) == ['0', '1']
        address = packed[0].address.resolve()
        os.kill(seen[0]['pid'], signal.SIGKILL)
        first = lambda: next(s for s in controller.statuses()
                             if (s.label, s.index) == ('packed', 0))
        wait_for(lambda: first().restarts == 1 and first().state == lp.NodeState.RUNNING,
                 timeout=30, what='the restart of packed/0')
        again = packed[0].dereference().where()
        assert again['pid'] != seen[0]['pid'] and again['actor_pid'] == actors[0]
        assert packed[0].address.resolve() == address
        assert packed[1].dereference().where()['pid'] == seen[1]['pid']
    wait_for(lambda: not marked_processes(token), timeout=30,
             what='the packed actors and their nodes to end')


@needs_ray
def test_unsatisfiable_gang_says_why_and_gives_up_at_its_timeout(ray_cluster):
    """A placement group no host can hold fails the launch after gang_timeout, naming the bundle."""
    program = lp.Program('toobig')
    program.add_node(lp.CourierNode(Pinger), label='pinger')
    start = time.monotonic()
    with pytest.raises(lp.LaunchError, match=r"INFEASIBLE: no host of the cluster has "
                                             r"\{'CPU': 1, 'GPU': 8\}.*nothing was started"):
        launch(program, 'ray', resources={'pinger': lp.RayResources(num_gpus=8)},
               ray_options={'address': ray_cluster, 'gang': True, 'gang_timeout': 2})
    assert 2 <= time.monotonic() - start < 15


@needs_ray
@slow
def test_elastic_group_grows_with_new_actors_and_shrinks(ray_cluster):
    """add_nodes places new actors (SPREAD over the hosts); the group handle follows both ways."""
    program = lp.Program('rayelastic')
    with program.group('member', elastic=True):
        program.add_node(lp.CourierNode(Member))
    watcher = program.add_node(lp.CourierNode(Watcher, program.group_handle('member')),
                               label='watcher')
    with launch(program, 'ray', resources={
            'member': lp.RayResources(scheduling='SPREAD')}) as controller:
        added = controller.add_nodes('member', 2)
        assert [(s.index, s.state) for s in added] == [(1, lp.NodeState.RUNNING),
                                                      (2, lp.NodeState.RUNNING)]
        wait_for(lambda: len(watcher.dereference().members()['answers']) == 3,
                 what='the watcher to see 3 members')
        controller.remove_nodes('member', 1)
        assert watcher.dereference().members()['answers'] == ['member/0', 'member/1']


@needs_ray
@slow
def test_mapreduce_example_counts_the_same_under_ray_as_under_local_mp(tmp_path, ray_cluster):
    """The MapReduce example over Ray actors writes the same counts as under local_mp."""
    from examples.mapreduce.program import make_program, read_counts
    paths = []
    for index in range(3):
        path = tmp_path / f'input_{index}.txt'
        path.write_text(' '.join(f'w{(index * 7 + n) % 23}' for n in range(500 * (index + 1))))
        paths.append(str(path))
    counts = {}
    for launch_type in ('local_mp', 'ray'):
        output = str(tmp_path / f'{launch_type}.tsv')
        launch(make_program(paths, output, 2), launch_type).wait(timeout=120)
        counts[launch_type] = read_counts(output)
    assert counts['ray'] == counts['local_mp'] and sum(counts['ray'].values()) == 3000


@needs_ray
@slow
def test_without_an_address_or_ray_address_a_local_ray_is_started():
    """No address and no RAY_ADDRESS: the launcher starts a Ray of its own and the program runs."""
    source = ('import launchpad_py as lp\n'
              'from nodes_for_tests import Pinger\n'
              'p = lp.Program("ownray"); h = p.add_node(lp.CourierNode(Pinger), label="pinger")\n'
              'with lp.launch(p, launch_type="ray"):\n'
              '    print(h.dereference().ping(3))\n')
    env = {key: value for key, value in os.environ.items() if key != 'RAY_ADDRESS'}
    with tempfile.TemporaryDirectory(prefix='lpray', dir='/tmp') as ray_dir:  # Short: socket paths.
        done = subprocess.run([sys.executable, '-c', source], capture_output=True, text=True,
                              timeout=180, cwd=REPO, env={
                                  **env, 'RAY_TMPDIR': ray_dir,
                                  'PYTHONPATH': os.path.join(REPO, 'tests') + os.pathsep + REPO})
        assert done.returncode == 0, done.stderr[-3000:]
        assert "('pong', 3)" in done.stdout
        wait_for(lambda: not marked_processes(ray_dir), timeout=30,
                 what="the launcher's own Ray to end with it")


@needs_ray
@slow
def test_ray_client_address_runs_the_program(ray_cluster):
    """Through Ray Client (ray://head:10001, as from outside a KubeRay cluster) nodes serve."""
    source = ('import sys, launchpad_py as lp\n'
              'from ray_nodes import Caller, Where\n'
              'p = lp.Program("client"); w = p.add_node(lp.CourierNode(Where), label="where")\n'
              'c = p.add_node(lp.CourierNode(Caller, w), label="caller")\n'
              'with lp.launch(p, launch_type="ray", ray_options={"address": sys.argv[1]}):\n'
              '    print(c.dereference().ask()["host"])\n')
    client_address = f'ray://{ray_cluster.rpartition(":")[0]}:10001'
    done = subprocess.run([sys.executable, '-c', source, client_address], capture_output=True,
                          text=True, timeout=120, cwd=REPO,
                          env={**os.environ, 'PYTHONPATH': os.path.join(REPO, 'tests')})
    assert done.returncode == 0, done.stderr[-3000:]
    printed = _printed_by_the_script(done.stdout)
    assert len(printed) == 1 and printed[0].startswith('10.250.0.1'), done.stdout


def _printed_by_the_script(stdout: str) -> list[str]:
    """The lines a launching script printed itself: not its nodes' output, nor the
    launcher's notes on them (such as Ray's slow start), which come as ``[label] ...``."""
    return [line for line in stdout.splitlines() if not line.startswith('[')]


def _only_the_test_cluster_runs_here(address: str) -> None:
    """Skips unless the one Ray this machine runs is the suite's: 'auto' must not find a user's."""
    from ray._private.services import find_gcs_addresses
    running = set(find_gcs_addresses())
    if running != {address}:
        pytest.skip(f"'auto' would pick among the Rays running here ({sorted(running)}), not only "
                    f'the test cluster {address}')


@needs_ray
@pytest.mark.parametrize('how', ['address_auto', 'RAY_ADDRESS'])
def test_the_cluster_is_found_by_auto_or_by_ray_address(ray_cluster, how):
    """ray_options={'address': 'auto'} finds the Ray running on this machine; without the option,
    RAY_ADDRESS names the cluster. Either way the nodes run on the cluster's worker hosts."""
    _only_the_test_cluster_runs_here(ray_cluster)
    options = '{"address": "auto"}' if how == 'address_auto' else '{}'
    source = ('import launchpad_py as lp\n'
              'from ray_nodes import Caller, Where\n'
              'p = lp.Program("found"); w = p.add_node(lp.CourierNode(Where), label="where")\n'
              'c = p.add_node(lp.CourierNode(Caller, w), label="caller")\n'
              f'with lp.launch(p, launch_type="ray", ray_options={options}) as controller:\n'
              '    print(c.dereference().ask()["host"])\n')
    env = {key: value for key, value in os.environ.items() if key != 'RAY_ADDRESS'}
    if how == 'RAY_ADDRESS':
        env['RAY_ADDRESS'] = ray_cluster
    done = subprocess.run([sys.executable, '-c', source], capture_output=True, text=True,
                          timeout=120, cwd=REPO,
                          env={**env, 'PYTHONPATH': os.path.join(REPO, 'tests')})
    assert done.returncode == 0, done.stderr[-3000:]
    # The worker hosts are 10.250.0.11-13; a Ray started here instead would place on this host.
    assert _printed_by_the_script(done.stdout) in (
        ['10.250.0.11'], ['10.250.0.12'], ['10.250.0.13']), done.stdout



def _raylet(ip: str | None = None):
    """The raylet of worker host ``ip`` (of any host when None), as a psutil process."""
    import psutil
    return next(p for p in psutil.process_iter(['cmdline'])
                if p.info['cmdline'] and p.info['cmdline'][0].endswith('/raylet/raylet')
                and (ip is None or f'--node_ip_address={ip}' in p.info['cmdline']))


def _ray_command() -> str:
    """The ``ray`` command of the running test cluster (beside its raylets' Ray)."""
    return os.path.join(_raylet().info['cmdline'][0].split('/lib/python')[0], 'bin', 'ray')


def _take_host_down(ip: str) -> None:
    """Kills worker host ``ip``'s Ray at once, as a lost machine would: its raylet, the
    raylet's children (agents, actors' workers, their node processes) and its log monitor;
    the host's sshd and slurmd stay."""
    import psutil
    raylet = _raylet(ip)
    doomed = [raylet, *raylet.children(recursive=True)]
    in_host = subprocess.run(['ip', 'netns', 'pids', f'lp-h{ip[-1]}'], capture_output=True,
                             text=True, check=True).stdout.split()
    for pid in in_host:
        try:
            process = psutil.Process(int(pid))
            if 'log_monitor.py' in ' '.join(process.cmdline()):
                doomed.append(process)
        except psutil.NoSuchProcess:
            pass
    for process in doomed:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass


def _bring_host_back(ip: str, ray_command: str) -> None:
    """Starts host ``ip``'s Ray worker again (scripts/ray_cluster.sh worker N) and waits until
    the cluster counts it alive."""
    import ray
    subprocess.run(['bash', os.path.join(REPO, 'scripts', 'ray_cluster.sh'), 'worker', ip[-1]],
                   env={**os.environ, 'LP_RAY_BIN': ray_command}, check=True, timeout=120)
    wait_for(lambda: any(n['Alive'] and n['NodeManagerAddress'] == ip for n in ray.nodes()),
             timeout=60, what=f'the Ray worker on {ip} to join again')


@needs_ray
@slow
@pytest.mark.parametrize('how', ['node_lost', 'preempted'])
@pytest.mark.timeout(300)
def test_a_lost_ray_host_restarts_its_node_elsewhere_uncounted(ray_cluster, how):
    """The Ray host an actor runs on goes (its raylet and processes killed; for 'preempted',
    drained for preemption first, as autoscaler v2 does): under lp.Restart(max_restarts=0) the
    node comes back on another host, restart_reasons says why, and its client follows."""
    import ray
    program = lp.Program(f'raylost{how[:4]}')
    handle = program.add_node(lp.CourierNode(Where), label='where')
    ray_command = _ray_command()
    with launch(program, 'ray', failure_policy={
            'where': lp.Restart(max_restarts=0, backoff=(0.05, 0.2))}) as controller:
        client = handle.dereference()
        before = client.where()['host']
        node_id = next(n['NodeID'] for n in ray.nodes()
                       if n['Alive'] and n['NodeManagerAddress'] == before)
        try:
            if how == 'preempted':
                subprocess.run([ray_command, 'drain-node', f'--address={ray_cluster}',
                                f'--node-id={node_id}', '--reason=DRAIN_NODE_REASON_PREEMPTION',
                                '--reason-message=test', '--deadline-remaining-seconds=1'],
                               check=True, timeout=60, capture_output=True)
            _take_host_down(before)
            status = lambda: controller.statuses()[0]
            wait_for(lambda: status().restart_reasons == {how: 1}
                     and status().state == lp.NodeState.RUNNING, timeout=120,
                     what=f'the node to come back after its host was {how}')
            try:
                after = client.where()['host']
            except courier.CourierUnavailableError:  # The one failed call; then it follows.
                after = client.where()['host']
            assert after != before
            assert handle.address.resolve().startswith(after + ':')
        finally:
            _bring_host_back(before, ray_command)


@needs_ray
@slow
def test_memory_monitor_eviction_restarts_uncounted_until_max_uncounted():
    """A Ray of the launcher's own (never the shared cluster) whose memory monitor finds its
    host always over the threshold kills the node's actor again and again: each kill is
    'evicted', restarted without counting (max_restarts=0), until max_uncounted=2 is spent
    and the failure says so."""
    source = ('import launchpad_py as lp\n'
              'from nodes_for_tests import Pinger\n'
              'p = lp.Program("rayoom"); p.add_node(lp.CourierNode(Pinger), label="pinger")\n'
              'policy = lp.Restart(max_restarts=0, backoff=(0.05, 0.2), max_uncounted=2)\n'
              'try:\n'
              '    lp.launch(p, launch_type="ray", failure_policy={"pinger": policy}'
              ').wait(timeout=240)\n'
              'except (lp.NodeFailedError, lp.LaunchError) as error:\n'
              '    print("ENDED:", error)\n')
    env = {key: value for key, value in os.environ.items() if key != 'RAY_ADDRESS'}
    with tempfile.TemporaryDirectory(prefix='lpoom', dir='/tmp') as ray_dir:  # Short: sockets.
        done = subprocess.run([sys.executable, '-c', source], capture_output=True, text=True,
                              timeout=300, cwd=REPO, env={
                                  **env, 'RAY_TMPDIR': ray_dir,
                                  # Ray's own settings, for this Ray only: always "low on memory".
                                  'RAY_memory_usage_threshold': '0.001',
                                  'RAY_memory_monitor_refresh_ms': '100',
                                  'PYTHONPATH': os.path.join(REPO, 'tests') + os.pathsep + REPO})
        wait_for(lambda: not marked_processes(ray_dir), timeout=30,
                 what="the launcher's own Ray to end with it")
    ended = next((line for line in done.stdout.splitlines() if line.startswith('ENDED:')), '')
    assert 'lost by evicted' in ended, done.stdout[-3000:] + done.stderr[-3000:]
    assert '(evicted 2)' in ended and 'lp.Restart(max_uncounted=2)' in ended, ended


@needs_ray
def test_ray_death_causes_map_to_lost_reasons():
    """Ray's own words for an actor's death become lost_by reasons (the memory monitor's is
    provoked only by the opt-in test above, on a Ray of its own, so its text is checked here
    too); an actor
    someone ray.kill-ed is the node's failure, not the platform's."""
    from ray import exceptions
    from launchpad_py.launchers.ray.starter import lost_reason
    oom = exceptions.RayActorError(error_msg='Task was killed due to the node running low on '
                                             'memory. Memory on the node ...')
    assert lost_reason(oom, True) == 'evicted'
    assert lost_reason(exceptions.RayActorError(preempted=True), False) == 'preempted'
    assert lost_reason(exceptions.RayActorError(error_msg='x'), False) == 'node_lost'
    killed = exceptions.RayActorError(error_msg='The actor was killed by `ray.kill`.')
    assert lost_reason(killed, True) is None and lost_reason(killed, None) is None


@needs_ray
def test_the_test_cluster_runs_this_checkouts_code():
    """scripts/ray_cluster.sh starts the cluster afresh when it runs from another checkout: its
    actors import launchpad_py from the Ray they were started with, so a fresh CI clone beside a
    developer's cluster would otherwise test the developer's code."""
    if not os.environ.get('LP_RAY_CLUSTER_OURS'):
        pytest.skip('only where this checkout brought the Ray cluster up (.ci/run sets '
                    'LP_RAY_CLUSTER_OURS=1); elsewhere the Ray tests skip, saying so, when the '
                    "cluster runs another checkout's code")
    assert conftest.ray_cluster_is_this_checkouts() is True
