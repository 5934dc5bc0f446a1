"""The Slurm launcher on a real Slurm: slurmctld here, slurmd on the namespace hosts h1..h3.

The cluster comes from scripts/slurm_cluster.sh (CI brings it up): 16 CPUs,
4000 MB and two fake GPUs per host, partition 'debug' and a DOWN partition
'lpdown'. The hosts share this filesystem and process table, so node pids
are visible here.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid

import pytest

import launchpad_py as lp
from conftest import (REPO, SLURM_LOGS, launch, launcher_report, marked_processes, needs_slurm,
                      slow, slurm_cluster, wait_for, wait_for_node_line)
from nodes_for_tests import Pinger, crash, serve_forever
from restart_nodes import Member
from ssh_nodes import BIG, print_gpus, store_program
from test_ssh import _alive, _wait_until_gone

pytestmark = needs_slurm
_HOSTS = {'h1', 'h2', 'h3'}
_QUICK_RESTART = lp.Restart(max_restarts=3, backoff=(0.05, 0.2))


@pytest.fixture(autouse=True)
def cluster():
    slurm_cluster()


def _job_of(pid: int) -> str:
    with open(f'/proc/{pid}/environ', 'rb') as f:
        variables = dict(item.split(b'=', 1) for item in f.read().split(b'\0') if b'=' in item)
    return variables[b'SLURM_JOB_ID'].decode()


def _job_state(job: str) -> str:
    shown = subprocess.run(['scontrol', '-o', 'show', 'job', job], capture_output=True,
                           text=True, timeout=30).stdout
    return re.search(r'JobState=(\w+)', shown).group(1)


def _job_ended(job: str) -> str | bool:
    state = _job_state(job)
    return state if state not in ('PENDING', 'RUNNING', 'CONFIGURING', 'COMPLETING') else False


def test_nodes_on_three_slurm_hosts_talk_over_their_addresses(tmp_path):
    """Nodes that fill a host each: clients on two hosts call a store on the third (64 MiB too)."""
    program, store = store_program(str(tmp_path))
    whole_host = lp.SlurmResources(cpus=16)
    with launch(program, 'slurm', resources={'store': whole_host, 'client': whole_host}) as running:
        wait_for(lambda: all(s.state == lp.NodeState.FINISHED or not running.is_running
                             for s in running.statuses() if s.label == 'client'),
                 timeout=120, what='both clients to finish')
    hosts = {(s.label, s.index): s.host for s in running.statuses()}
    assert set(hosts.values()) == _HOSTS, hosts
    assert re.fullmatch(r'10\.250\.0\.1[1-3]:\d+', store.address.resolve())
    for index in range(2):
        with open(tmp_path / f'client{index}.json') as f:
            result = json.load(f)
        assert result['client_host'] == hosts['client', index] != result['server_host']
        assert result['server_host'] == hosts['store', 0]
        assert result['echo'] == 'hello' and result['futures'] == list(range(50))
        assert result['big_bytes'] == BIG * 4 and result['big_equal']


def test_statuses_name_slurm_host_and_the_job_has_a_step_per_node(tmp_path):
    """Each node is a job step named after it; statuses show its Slurm host and its pid there."""
    program = lp.Program('steps')
    program.add_node(lp.CourierNode(Pinger), label='pinger')
    program.add_node(lp.PyNode(serve_forever), label='waiter')
    with launch(program, 'slurm', slurm_options={'output_dir': str(tmp_path)}) as running:
        statuses = running.statuses()
        assert {s.host for s in statuses} <= _HOSTS
        job = _job_of(statuses[0].pid)
        assert _job_of(statuses[1].pid) == job  # One job for the program.
        steps = subprocess.run(['squeue', '-h', '-s', '-j', job, '-o', '%j'], capture_output=True,
                               text=True, timeout=30).stdout.split()
        assert sorted(steps) == ['pinger/0', 'waiter/0']
    assert wait_for(lambda: _job_ended(job), timeout=30, what='the job to end') == 'COMPLETED'
    assert not any(map(_alive, (s.pid for s in statuses)))
    assert sorted(os.listdir(tmp_path / f'steps-{job}')) == ['pinger_0.log', 'waiter_0.log']


def test_node_output_is_prefixed_and_kept_in_the_jobs_directory(tmp_path, capfd):
    """A node's lines come back as [label/index] and also go to its file under the job's directory."""
    program = lp.Program('logs')
    program.add_node(lp.PyNode(print_gpus), label='printer')
    with launch(program, 'slurm', slurm_options={'output_dir': str(tmp_path)}) as running:
        wait_for_node_line(running, 'printer/0', 'CUDA_VISIBLE_DEVICES=')
        job = _job_of(running.statuses()[0].pid)
    # The program has ended, so nothing writes while the terminal's capture is read.
    assert '[printer/0] CUDA_VISIBLE_DEVICES=' in capfd.readouterr().out.splitlines()
    with open(tmp_path / f'logs-{job}' / 'printer_0.log') as log:
        assert log.read().splitlines()[0] == 'CUDA_VISIBLE_DEVICES='


def test_gpus_become_the_steps_gpus_and_others_see_none(monkeypatch):
    """gpus=1 gives each learner one GPU of its host; actors see none, whatever the launcher sees."""
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '0,1')
    program = lp.Program('gpus')
    with program.group('learner'):
        for _ in range(2):
            program.add_node(lp.PyNode(print_gpus))
    program.add_node(lp.PyNode(print_gpus), label='actor')
    resources = {'learner': lp.SlurmResources(gpus=1)}
    with launch(program, 'slurm', resources=resources) as running:
        lines = sorted(f'[{name}] ' + wait_for_node_line(running, name, 'CUDA_VISIBLE_DEVICES=')
                       for name in ('actor/0', 'learner/0', 'learner/1'))
        hosts = {f'{s.label}/{s.index}': s.host for s in running.statuses()}
    assert lines[0] == '[actor/0] CUDA_VISIBLE_DEVICES='
    learner_gpus = [line.rpartition('=')[2] for line in lines[1:]]
    assert all(gpu in ('0', '1') for gpu in learner_gpus), lines
    if hosts['learner/0'] == hosts['learner/1']:
        assert sorted(learner_gpus) == ['0', '1']  # Each its own GPU of the shared host.


def test_crash_names_the_slurm_host():
    """A node that raises fails wait() with its traceback and the Slurm host it ran on."""
    program = lp.Program('crashing')
    program.add_node(lp.CourierNode(Pinger), label='pinger')
    program.add_node(lp.PyNode(crash, 'boom on a slurm host'), label='crasher')
    running = launch(program, 'slurm')
    with pytest.raises(lp.NodeFailedError, match=r"boom on a slurm host \(on host h[1-3]\)") as info:
        running.wait(timeout=60)
    assert 'raise ValueError(message)' in info.value.remote_traceback
    (crasher,) = [s for s in running.statuses() if s.label == 'crasher']
    assert f'(on host {crasher.host})' in str(info.value)


def test_unknown_partition_fails_at_once_naming_it():
    """A partition Slurm does not have: salloc's refusal, and what each group asked for."""
    program = lp.Program('nopart')
    program.add_node(lp.PyNode(serve_forever), label='waiter')
    start = time.monotonic()
    with pytest.raises(lp.LaunchError, match='Invalid partition name specified') as info:
        launch(program, 'slurm', resources={'waiter': lp.SlurmResources(partition='nosuch')})
    assert time.monotonic() - start < 20
    assert "groups ['waiter']: 1 node(s) x 1 CPU(s) on partition nosuch" in str(info.value)


def test_impossible_request_fails_instead_of_waiting():
    """More CPUs per node than any host has: pending for a reason no waiting cures, so it fails."""
    program = lp.Program('toobig')
    program.add_node(lp.PyNode(serve_forever), label='hungry')
    with pytest.raises(lp.LaunchError, match=r'pending with reason PartitionConfig, which no '
                                             r'waiting cures') as info:
        launch(program, 'slurm', resources={'hungry': lp.SlurmResources(cpus=64)})
    job = re.search(r'\((\d+)\)', str(info.value)).group(1)
    assert wait_for(lambda: _job_ended(job), timeout=30, what='the job to go') == 'CANCELLED'


def test_pending_job_is_reported_with_its_reason_then_given_up(capsys):
    """A job on a DOWN partition: progress lines say it is pending and why; the timeout cancels it."""
    program = lp.Program('pending')
    program.add_node(lp.PyNode(serve_forever), label='waiter')
    with pytest.raises(lp.LaunchError, match=r'still pending after 3s \(reason PartitionDown\); '
                                             r'the job was cancelled') as info:
        launch(program, 'slurm', resources={'waiter': lp.SlurmResources(partition='lpdown')},
               slurm_options={'pending_timeout': 3, 'output_dir': SLURM_LOGS})
    job = re.search(r'\((\d+)\)', str(info.value)).group(1)
    assert (f"launchpad_py: Slurm job {job} of program 'pending' is pending (PartitionDown)"
            in capsys.readouterr().out)
    assert wait_for(lambda: _job_ended(job), timeout=30, what='the job to go') == 'CANCELLED'


@pytest.mark.parametrize('policy', [None, _QUICK_RESTART], ids=['default', 'restart'])
def test_scancel_ends_the_program_and_wait_reports_it(policy):
    """scancel of the program's job ends every node; wait() says the job was cancelled. Nodes
    with lp.Restart are not started again: what the scheduler took away stays away."""
    program = lp.Program('cancelled')
    program.add_node(lp.CourierNode(Pinger), label='pinger')
    program.add_node(lp.PyNode(serve_forever), label='waiter')
    running = launch(program, 'slurm', failure_policy=policy and {'pinger': policy,
                                                                  'waiter': policy})
    pids = [s.pid for s in running.statuses()]
    job = _job_of(pids[0])
    subprocess.run(['scancel', job], check=True, timeout=30)
    with pytest.raises(lp.NodeFailedError, match=rf'Slurm job {job} was cancelled'):
        running.wait(timeout=60)
    assert not any(map(_alive, pids))
    assert _job_state(job) == 'CANCELLED'
    assert all(status.restarts == 0 for status in running.statuses())


def test_killed_node_restarts_as_a_step_on_its_host_at_its_address():
    """lp.Restart under slurm: a SIGKILLed node comes back as a new job step pinned to the host
    it ran on, serving on its old host:port, with its restart counted."""
    program = lp.Program('slurm_restarts')
    handle = program.add_node(lp.CourierNode(Member), label='member')
    with launch(program, 'slurm', failure_policy={'member': _QUICK_RESTART}) as running:
        client = handle.dereference()
        address, (before,) = handle.address.resolve(), running.statuses()
        old = client.who()['pid']
        job = _job_of(old)
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: running.statuses()[0].restarts == 1, timeout=60, what='the restart')
        new = client.who()['pid']
        (after,) = running.statuses()
        assert new != old and handle.address.resolve() == address
        assert (after.state, after.host, after.pid) == (lp.NodeState.RUNNING, before.host, new)
        assert _job_of(new) == job  # A step of the program's job, not a job of its own.


def _start_launcher(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, os.path.join(REPO, 'tests', 'slurm_nodes.py'), *args],
                            cwd=REPO, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, 'PYTHONPATH': os.path.join(REPO, 'tests')})


def test_sigkill_of_the_launcher_ends_the_job_and_every_node():
    """SIGKILL the launcher: every node process (and colocated child) goes, and so does the job."""
    token = f'lp-slurm-kill-{uuid.uuid4().hex}'
    launcher = _start_launcher('spread', token)
    nodes = launcher_report(launcher.stdout)
    assert {host for host, _ in nodes} <= _HOSTS
    job = _job_of(nodes[0][1])
    # Three nodes and two colocated children at least.
    assert len(marked_processes(token)) >= 3 + 2
    launcher.kill()
    launcher.wait(timeout=10)
    launcher.stdout.close()
    seconds = _wait_until_gone(token, timeout=20)
    assert wait_for(lambda: _job_ended(job), timeout=30, what='the job to end')
    print(f'all node processes gone {seconds:.2f}s after SIGKILL of the launcher')


@pytest.mark.parametrize('how', [signal.SIGKILL, signal.SIGINT], ids=['sigkill', 'ctrl_c'])
def test_launcher_ended_while_waiting_for_its_job_cancels_the_job(how):
    """A launcher killed or interrupted while its job is pending leaves no job to start later."""
    token = uuid.uuid4().hex[:12]
    launcher = _start_launcher('pending', token)
    line = launcher.stdout.readline()
    job = re.search(r'Slurm job (\d+) .* is pending \(PartitionDown\)', line).group(1)
    launcher.send_signal(how)
    launcher.wait(timeout=30)
    launcher.stdout.close()
    assert wait_for(lambda: _job_ended(job), timeout=30, what='the job to go') == 'CANCELLED'


def test_ctrl_c_stops_every_node_and_completes_the_job():
    """SIGINT to the launching script stops the program; it exits 0 and its job completes."""
    token = f'lp-slurm-int-{uuid.uuid4().hex}'
    launcher = _start_launcher('spread', token)
    nodes = launcher_report(launcher.stdout)
    job = _job_of(nodes[0][1])
    launcher.send_signal(signal.SIGINT)
    assert launcher.wait(timeout=60) == 0
    launcher.stdout.close()
    _wait_until_gone(token, timeout=20)
    assert wait_for(lambda: _job_ended(job), timeout=30, what='the job to end') == 'COMPLETED'


def test_launch_inside_an_sbatch_allocation_uses_its_job(tmp_path):
    """From an sbatch script, nodes become steps of that job; a program too big for it is refused."""
    result_path = tmp_path / 'result.json'
    script = tmp_path / 'job.sh'
    script.write_text(f'#!/bin/sh\nexec {sys.executable} {REPO}/tests/slurm_nodes.py '
                      f'in_allocation {result_path}\n')
    submitted = subprocess.run(
        ['sbatch', '--parsable', '--ntasks=2', '--nodes=2', f'--output={tmp_path}/job.out',
         f'--chdir={REPO}', f'--export=ALL,PYTHONPATH={REPO}/tests', str(script)],
        capture_output=True, text=True, timeout=30, check=True)
    job = submitted.stdout.strip().split(';')[0]
    state = wait_for(lambda: _job_ended(job), timeout=120, what='the sbatch job to end')
    output = (tmp_path / 'job.out').read_text()
    assert state == 'COMPLETED', output
    with open(result_path) as f:
        result = json.load(f)
    assert result['launcher_job'] == job
    assert [seen[0] for seen in result['nodes']] == [job, job]
    assert len({seen[2] for seen in result['nodes']}) == 2  # Two job steps of their own.
    assert set(result['hosts']) <= _HOSTS
    assert result['too_big'].startswith('the program needs 3 CPUs')
    assert f'but Slurm job {job}, which the launcher runs in, has 2' in result['too_big']


def test_flags_choose_slurm_for_a_script_that_launches_without_resources(tmp_path):
    """--lp_launch_type=slurm and --lp_slurm_* reach an unchanged script."""
    done = subprocess.run(
        [sys.executable, '-m', 'examples.hello_world', '--lp_launch_type=slurm',
         f'--lp_slurm_output_dir={tmp_path}', '--lp_slurm_time=00:05:00'],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "[greeter/0] Hello, world! (from node 'world')" in done.stdout
    job = re.search(r'runs as Slurm job (\d+)', done.stdout).group(1)
    shown = subprocess.run(['scontrol', '-o', 'show', 'job', job], capture_output=True, text=True,
                           timeout=30).stdout
    assert 'TimeLimit=00:05:00' in shown and os.path.isdir(tmp_path / f'hello_world-{job}')


@pytest.mark.parametrize('kwargs, message', [
    ({'cpus': 0}, r'cpus must be an int >= 1 per node \(got 0\)'),
    ({'gpus': -1}, r'gpus must be an int >= 0 per node \(got -1\)'),
    ({'mem': 'lots'}, r"mem must be an amount such as '32G'.*\(got 'lots'\)"),
    ({'partition': ''}, r"partition must be a partition name such as 'gpu' \(got ''\)"),
    ({'env': {'A': 1}}, r"env must map variable names to strings \(got \{'A': 1\}\)"),
])
def test_bad_resources_are_named(kwargs, message):
    """Each bad field of lp.SlurmResources is named with its value."""
    with pytest.raises((TypeError, ValueError), match=message):
        lp.SlurmResources(**kwargs)


def test_memory_is_asked_per_cpu():
    """Slurm sizes memory per CPU for jobs of several tasks: mem is divided over the node's CPUs."""
    assert lp.SlurmResources(cpus=8, mem='32G').mem_per_cpu() == 4096
    assert lp.SlurmResources(cpus=3, mem=1000).mem_per_cpu() == 334
    assert lp.SlurmResources(mem='512k').megabytes() == 1


@pytest.mark.parametrize('launch_kwargs, message', [
    ({'slurm_options': {'walltime': '1:00'}}, r"slurm_options has unknown keys \['walltime'\]"),
    ({'slurm_options': {'extra_args': 42}}, r"'extra_args'\] must be a list"),
    ({'slurm_options': {'pending_timeout': -1}}, r"'pending_timeout'\] must be seconds >= 0"),
    ({'resources': {'waiter': lp.SshHost('h1')}}, r"resources\['waiter'\] must be "
                                                  r"lp.SlurmResources\(...\) for slurm"),
])
def test_bad_options_fail_before_anything_is_submitted(launch_kwargs, message):
    """Unknown or malformed slurm_options and foreign resources are errors naming the culprit."""
    program = lp.Program('bad')
    program.add_node(lp.PyNode(serve_forever), label='waiter')
    with pytest.raises(lp.ResourcesError, match=message):
        lp.launch(program, launch_type='slurm', **launch_kwargs)


def test_slurm_options_belong_to_slurm():
    """slurm_options given to another launcher are an error, not ignored."""
    program = lp.Program('other')
    program.add_node(lp.PyNode(serve_forever), label='waiter')
    with pytest.raises(lp.ProgramError, match=r"slurm_options= belongs to launch_type='slurm', "
                                              r"but this launch is 'local_mp'"):
        lp.launch(program, launch_type='local_mp', slurm_options={'time': '1:00'})


@slow
def test_time_limit_ends_the_program_and_wait_says_so():
    """A job that reaches its time limit ends the program; wait() names the limit (about 65 s)."""
    program = lp.Program('limited')
    program.add_node(lp.PyNode(serve_forever), label='waiter')
    running = launch(program, 'slurm', slurm_options={'time': '00:01:00', 'output_dir': SLURM_LOGS})
    with pytest.raises(lp.NodeFailedError, match=r'Slurm job \d+ reached its time limit '
                                                 r'\(JobState=TIMEOUT\)'):
        running.wait(timeout=180)


def test_steps_per_host_start_every_node_through_one_agent_step_per_host():
    """steps='host': the job has one step per host (its agent), not one per node; every node
    answers, and a SIGKILLed node comes back through its host's agent at its address."""
    program = lp.Program('host_steps')
    with program.group('member'):
        handles = [program.add_node(lp.CourierNode(Member)) for _ in range(6)]
    with launch(program, 'slurm', slurm_options={'steps': 'host', 'output_dir': SLURM_LOGS},
                failure_policy={'member': _QUICK_RESTART}) as running:
        assert {h.dereference().who()['pid'] for h in handles} == {
            s.pid for s in running.statuses()}
        job = _job_of(running.statuses()[0].pid)
        steps = subprocess.run(['squeue', '-h', '-s', '-j', job, '-o', '%j'], capture_output=True,
                               text=True, timeout=30).stdout.split()
        hosts = {s.host for s in running.statuses()}
        assert sorted(steps) == sorted(f'lp-agent-{host}' for host in hosts) and hosts <= _HOSTS
        before = running.statuses()[2]
        address = handles[2].address.resolve()
        os.kill(before.pid, signal.SIGKILL)
        wait_for(lambda: (running.statuses()[2].restarts, running.statuses()[2].state) == (
            1, lp.NodeState.RUNNING), timeout=60, what='the restart')
        after = running.statuses()[2]
        assert handles[2].dereference().who()['pid'] == after.pid != before.pid
        assert (after.host, handles[2].address.resolve()) == (before.host, address)
    assert wait_for(lambda: _job_ended(job), timeout=30, what='the job to end') == 'COMPLETED'


def test_steps_per_host_with_gpus_is_refused_naming_the_request():
    """steps='host' cannot give each node its own GPUs: refused before anything is submitted."""
    program = lp.Program('gpu_host_steps')
    program.add_node(lp.PyNode(serve_forever), label='learner')
    with pytest.raises(lp.ProgramError, match=r"steps'\] = 'host' needs .* without GPUs"):
        launch(program, 'slurm', slurm_options={'steps': 'host', 'output_dir': SLURM_LOGS},
               resources={'learner': lp.SlurmResources(gpus=1)})
