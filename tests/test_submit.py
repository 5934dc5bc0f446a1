"""Submitted programs (issue 27): the controller runs where the program does, and outlives us.

Real parts only: sbatch jobs on the Slurm test cluster, a detached controller on
the namespace host h1 over sshd, and the CLI run as a user runs it (a fresh
``python -m launchpad_py``) from other processes. The hosts share this process
table, so a submission's processes are visible here and can be checked gone.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
import urllib.request

import psutil
import pytest

import launchpad_py as lp
from conftest import (REPO, SSH_OPTIONS, needs_slurm, needs_ssh_hosts, slow, slurm_cluster,
                      ssh_host, wait_for)
from launchpad_py.submission import logs, records, stamps
from launchpad_py.submission.submitted import submitted_programs

SCRIPT = os.path.join(REPO, 'tests', 'submit_scripts.py')


@pytest.fixture(autouse=True)
def programs_dir(tmp_path, monkeypatch):
    """Each test keeps its program records in a directory of its own."""
    path = tmp_path / 'programs'
    monkeypatch.setenv(records.DIR_ENV, str(path))
    monkeypatch.chdir(tmp_path)  # Where submitted scripts run (and Slurm node logs go).
    yield path
    for program in submitted_programs():  # A failed test's program must not run on.
        if program.state() in ('pending', 'running'):
            program.stop(grace=0, timeout=30)


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m launchpad_py ARGS`` in a process of its own, as a user would run it."""
    return subprocess.run([sys.executable, '-m', 'launchpad_py', *args], capture_output=True,
                          text=True, timeout=timeout, start_new_session=True)


def family(pid: int) -> list[psutil.Process]:
    """The process ``pid`` and every process below it."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def assert_gone(processes: list[psutil.Process]) -> None:
    _, alive = psutil.wait_procs(processes, timeout=30)
    assert not alive, f'left running: {alive}'


def ticks(program) -> int:
    return program.logs(node='worker/0', grep=r'^\[worker/0\] tick ').count('\n')


def test_help_lists_the_commands():
    """`python -m launchpad_py --help` names every command and says what each does."""
    done = cli('--help')
    assert done.returncode == 0, done.stderr
    for command in ('submit', 'list', 'status', 'logs', 'stop', 'dashboard'):
        assert re.search(rf'^    {command}\s', done.stdout, re.MULTILINE), command
    assert 'walk_away.md' in done.stdout
    assert cli('logs', '--help').stdout.count('--grep') == 2  # In the usage and the list.


def test_an_unknown_id_is_exit_code_3_with_a_message(programs_dir):
    """Every command that takes an id says there is no such program, with exit code 3."""
    programs_dir.mkdir(mode=0o700)
    for command in ('status', 'logs', 'stop', 'dashboard'):
        done = cli(command, 'nosuch-123456')
        assert done.returncode == 3, (command, done)
        assert "no program 'nosuch-123456' was submitted by this user" in done.stderr
    done = cli('status', '../etc')
    assert done.returncode == 3 and 'is not a program id' in done.stderr
    assert cli('list').returncode == 0


def test_bad_submissions_are_refused_naming_the_problem(tmp_path):
    """No script, or ssh without a host: exit code 1, and no record is left behind."""
    done = cli('submit', str(tmp_path / 'missing.py'))
    assert done.returncode == 1 and 'no script' in done.stderr
    done = cli('submit', '--launch_type', 'ssh', SCRIPT)
    assert done.returncode == 1 and 'needs host=' in done.stderr
    assert cli('bogus').returncode == 2
    assert records.all_records() == []


def test_records_that_are_not_ours_alone_are_refused(programs_dir):
    """A program directory others may read is refused, as the run directory's files are."""
    programs_dir.mkdir(mode=0o700)
    planted = programs_dir / 'planted-000000'
    planted.mkdir(mode=0o755)
    (planted / 'record.json').write_text('{"id": "planted-000000"}')
    with pytest.raises(PermissionError, match='mode at most 0700'):
        lp.attach('planted-000000')
    assert records.all_records() == []


def test_logs_select_a_group_a_node_and_a_pattern():
    """--node takes a label (the whole group) or label/index; --grep a regular expression."""
    lines = ['launchpad_py: started\n', '[actor/0] step 1\n', '[actor/1] step 1\n',
             '[actor/10] loss 3\n', '[learner/0] loss 2\n']
    assert list(logs.select(lines, node='actor')) == lines[1:4]
    assert list(logs.select(lines, node='actor/1')) == [lines[2]]
    assert list(logs.select(lines, grep=r'loss \d')) == lines[3:]
    assert list(logs.select(lines, node='actor', grep='loss')) == [lines[3]]


def test_log_lines_carry_their_time_and_since_picks_the_recent_ones():
    """The controller's lines get a UTC time; --since takes a duration or a time; unstamped
    lines (written by a lower layer) count as written with the line before them."""
    written = io.StringIO()
    stream = stamps.Stamped(written)
    stream.write('[actor/0] old')
    stream.write(' line\n[actor/0] second\n')
    lines = written.getvalue().splitlines(True)
    assert len(lines) == 2 and all(stamps.split(line)[1].startswith('[actor/') for line in lines)
    assert abs(stamps.split(lines[0])[0] - time.time()) < 60
    old = stamps.stamp(1000.0) + '[actor/0] old\n'
    log = [old, 'unstamped, after old\n', stamps.stamp(5000.0) + '[actor/0] new\n']
    assert list(logs.select(log, since=2000.0)) == ['[actor/0] new\n']
    assert list(logs.select(log, since=500.0)) == ['[actor/0] old\n', 'unstamped, after old\n',
                                                   '[actor/0] new\n']
    assert list(logs.select(log, node='actor', times=True))[0] == old
    assert stamps.parse_since('10m', now=4000.0) == 3400.0
    assert stamps.parse_since('1970-01-01T01:00') == 3600.0
    with pytest.raises(ValueError, match='a duration such as 90s'):
        stamps.parse_since('yesterday')


@needs_ssh_hosts
def test_ssh_submission_outlives_its_connection_and_stops_from_another_process():
    """Submitted to h1, the program runs with no ssh client of ours left; `stop` ends it all."""
    ssh_host('h1')  # Fails, saying how to fix it, when the hosts are down.
    done = cli('submit', '--launch_type', 'ssh', '--host', 'h1',
               f'--ssh_options={" ".join(SSH_OPTIONS)}', '--program_launch_type', 'local_mp',
               '--name', 'ticker', SCRIPT, 'ticker', '--lp_dashboard')
    assert done.returncode == 0, done.stderr
    program = lp.attach(done.stdout.strip())
    assert program.launcher == 'ssh' and program.record['host'] == 'h1'
    secret = os.path.join(program.record['dir'], 'secret')
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600
    # Every ssh client on this machine that belongs to the submission: none should be left.
    for client in psutil.process_iter(['name', 'cmdline']):
        if client.info['name'] == 'ssh' and program.record['dir'] in ' '.join(
                client.info['cmdline'] or ()):
            client.send_signal(signal.SIGKILL)
    wait_for(lambda: ticks(program) >= 3, 60, 'the node to tick')
    before = ticks(program)
    wait_for(lambda: ticks(program) > before, 30, 'the node to tick on, with no ssh client')
    processes = family(program.record['pid'])
    assert len(processes) >= 2  # The controller and its node.
    key = records.secret_of(program.record).hex()
    assert not [p for p in processes if key in ' '.join(p.cmdline())]  # Never in argv.
    listed = cli('list')
    assert listed.returncode == 0
    assert any(line.split()[:4] == [program.id, 'ticker', 'ssh', 'running']
               and line.split()[6] == '1/1' for line in listed.stdout.splitlines())
    status = cli('status', program.id)
    assert status.returncode == 0 and 'worker/0  running' in status.stdout
    assert ' tick ' in cli('logs', program.id, '--since', '1h', '--node', 'worker/0').stdout
    assert cli('logs', program.id, '--since', '2999-01-01T00:00').stdout == ''
    assert cli('logs', program.id, '--since', 'soon').returncode == 2
    board = subprocess.Popen([sys.executable, '-m', 'launchpad_py', 'dashboard', program.id],
                             stdout=subprocess.PIPE, text=True)
    url = board.stdout.readline().strip()
    assert url.startswith('http://127.0.0.1:') and '/?token=' in url
    page = urllib.request.urlopen(url.replace('/?', '/api/status?'), timeout=30).read()
    assert json.loads(page)['program'] == 'ticker'
    stopped = cli('stop', program.id, '--grace', '5')
    assert stopped.returncode == 0 and stopped.stdout.strip() == f'{program.id}: ended', stopped
    assert_gone(processes)
    assert program.state() == 'ended' and program.wait(timeout=10) == 0
    assert board.wait(timeout=30) == 0  # The forward ends with the program.


@needs_ssh_hosts
def test_a_submitted_controller_killed_on_its_host_takes_its_nodes_along():
    """SIGKILL of the controller on h1: its node ends by itself, and the program is 'lost'."""
    program = lp.submit(SCRIPT, 'ticker', launch_type='ssh', host='h1', ssh_options=SSH_OPTIONS,
                        program_launch_type='local_mp', name='ticker')
    wait_for(lambda: ticks(program) >= 1, 60, 'the node to tick')
    processes = family(program.record['pid'])
    assert len(processes) >= 2
    processes[0].kill()
    assert_gone(processes)
    assert program.state() == 'lost'
    with pytest.raises(lp.LaunchError, match='ended without a result'):
        program.wait(timeout=10)


@needs_slurm
def test_a_submitted_controller_killed_in_its_job_ends_the_job():
    """SIGKILL of the batch step's controller: Slurm ends the job, and every node with it."""
    program, processes = _ticking_in_slurm()
    next(p for p in processes if 'controller_main' in ' '.join(p.cmdline())).kill()
    assert_gone(processes)
    wait_for(lambda: _squeue(program.record['job_id']) == '', 60, 'the job to end')
    assert program.state() == 'lost'


@needs_ssh_hosts
def test_a_program_object_submitted_over_ssh_runs_and_ends():
    """lp.submit(program, ...) pickles the program; it runs on h1 and wait() gets exit code 0."""
    import submit_scripts
    program = lp.Program('short')
    program.add_node(lp.PyNode(submit_scripts.short), label='worker')
    submitted = lp.submit(program, launch_type='ssh', host='h1', ssh_options=SSH_OPTIONS)
    assert submitted.name == 'short' and submitted.id.startswith('short-')
    assert submitted.wait(timeout=120) == 0
    assert submitted.logs(node='worker') == '[worker/0] done\n'
    assert lp.attach(submitted.id).state() == 'ended'
    assert_gone(family(submitted.record['pid']))


@needs_slurm
def test_slurm_submission_runs_on_after_the_submitter_and_stops_from_another_process():
    """An sbatch job holds the controller; its nodes are steps of that job; `stop` ends them."""
    slurm_cluster()
    done = cli('submit', '--sbatch=--ntasks=2', '--name', 'ticker', SCRIPT, 'ticker',
               '--lp_dashboard')
    assert done.returncode == 0, done.stderr  # The submitting process has exited.
    program = lp.attach(done.stdout.strip())
    job = program.record['job_id']
    wait_for(lambda: ticks(program) >= 3, 90, 'the node to tick inside the job')
    assert program.status()['programs'][0]['launch_type'] == 'slurm'
    follow = subprocess.Popen([sys.executable, '-m', 'launchpad_py', 'logs', program.id, '-f',
                               '--grep', r'\] tick '], stdout=subprocess.PIPE, text=True)
    assert follow.stdout.readline().startswith('[worker/0] tick ')
    controller = _job_processes(job)
    board = subprocess.Popen([sys.executable, '-m', 'launchpad_py', 'dashboard', program.id,
                              f'--ssh_options={" ".join(SSH_OPTIONS)}'], stdout=subprocess.PIPE,
                             text=True)  # To the node's address, as Slurm knows it.
    url = board.stdout.readline().strip()
    status = json.loads(urllib.request.urlopen(url.replace('/?', '/api/status?'), timeout=30).read())
    assert status['program'] == 'ticker'
    stopped = cli('stop', program.id)
    assert stopped.returncode == 0 and stopped.stdout.strip() == f'{program.id}: ended', stopped
    assert all(' tick ' in line for line in follow.stdout)  # Ends once the program has.
    assert follow.wait(timeout=30) == 0
    assert board.wait(timeout=30) == 0  # The forward ends with the program.
    assert_gone(controller)
    wait_for(lambda: _squeue(job) == '', 60, f'Slurm job {job} to end')


@needs_slurm
def test_scancel_ends_a_submitted_program_with_nothing_left():
    """When Slurm cancels the job, the controller and every node go; state is no longer running."""
    program, processes = _ticking_in_slurm()
    subprocess.run(['scancel', program.record['job_id']], check=True, timeout=30)
    assert_gone(processes)
    wait_for(lambda: program.state() not in ('pending', 'running'), 60, 'the state to change')


@needs_slurm
def test_a_short_slurm_program_ends_by_itself():
    """The script's program ends; wait() from this process gets its exit code, logs its output."""
    slurm_cluster()
    program = lp.submit(SCRIPT, 'short', sbatch_args=['--ntasks=1'])
    assert program.wait(timeout=120) == 0
    assert '[worker/0] done\n' in program.logs()
    assert cli('status', program.id).stdout == (
        f"{program.id}: 'submit_scripts' on slurm (Slurm job {program.record['job_id']}), ended, "
        f'exit code 0; started {records.started_text(program.record)}\n')
    stopped = cli('stop', program.id)  # Stopping what has ended says so, and succeeds.
    assert stopped.returncode == 0 and stopped.stdout == f'{program.id}: ended\n'


def test_requeue_needs_slurm_and_signal_s_needs_requeue():
    with pytest.raises(lp.ProgramError, match="requeue=True is for launch_type='slurm'"):
        lp.submit(SCRIPT, 'ticker', launch_type='ssh', host='h1', requeue=True)
    with pytest.raises(lp.ProgramError, match='signal_s must be seconds >= 1'):
        lp.submit(SCRIPT, 'ticker', signal_s=60)


@needs_slurm
@slow
@pytest.mark.timeout(600)
def test_a_requeued_job_resumes_the_program_from_its_checkpoints():
    """scontrol requeue (as a preemption does): SIGTERM, the job back in the queue (Slurm holds a
    requeued job about two minutes), then the program runs again in the new allocation and its
    node goes on from the count it saved; no result was written in between."""
    slurm_cluster()
    program = lp.submit(SCRIPT, 'resumer', sbatch_args=['--ntasks=1'], name='resumer',
                        requeue=True)
    wait_for(lambda: ticks(program) >= 5, 90, 'the node to tick inside the job')
    subprocess.run(['scontrol', 'requeue', program.record['job_id']], check=True, timeout=30)
    wait_for(lambda: program.state() == 'pending', 60, 'the job to be requeued')
    assert program.result() is None
    resumed = wait_for(lambda: [int(n) for n in re.findall(r'resumed from (\d+)',
                                                           program.logs(node='worker/0'))][1:],
                       400, 'the program to start again in the requeued job')
    assert resumed[0] >= 5
    stopped = cli('stop', program.id)
    assert stopped.returncode == 0, stopped


@needs_slurm
@slow
@pytest.mark.timeout(600)
def test_a_job_near_its_time_limit_requeues_itself_and_resumes():
    """signal_s: Slurm warns the controller (SIGUSR2) before the one-minute limit; it requeues
    the job, whose next allocation resumes the node from its checkpoint."""
    slurm_cluster()
    program = lp.submit(SCRIPT, 'resumer', sbatch_args=['--ntasks=1', '--time=1'],
                        name='resumer', requeue=True, signal_s=50)
    wait_for(lambda: 'the time limit is 50 s away' in program.logs(), 120,
             'the warning before the time limit')
    resumed = wait_for(lambda: [int(n) for n in re.findall(r'resumed from (\d+)',
                                                           program.logs(node='worker/0'))][1:],
                       400, 'the program to start again in the requeued job')
    assert resumed[0] >= 1
    assert cli('stop', program.id).returncode == 0


def _server_lines(program) -> list[tuple[str, int]]:
    """The parameter server's ``server: saved version N`` and ``server: resumed from version N``
    lines, in order, as (``saved`` or ``resumed from``, N)."""
    return [(what, int(n)) for what, n in re.findall(r'server: (saved|resumed from) version (\d+)',
                                                     program.logs(node='server/0'))]


def _until_resumed(lines: list[tuple[str, int]]) -> list[tuple[str, int]] | None:
    """``lines`` up to the first ``resumed from`` one, None while there is none."""
    ends = [i for i, (what, _) in enumerate(lines) if what == 'resumed from']
    return lines[:ends[0] + 1] if ends else None


@needs_slurm
@slow
@pytest.mark.timeout(600)
def test_a_requeued_parameter_server_resumes_with_its_version_and_params():
    """The parameter-server example in a requeueable job: scontrol requeue, and in the new
    allocation the server starts from the last version it saved in the old one (its
    checkpoint() runs on the SIGTERM too), then goes on counting from there."""
    slurm_cluster()
    program = lp.submit(SCRIPT, 'param_server', sbatch_args=['--ntasks=2'], name='param_server',
                        requeue=True)
    wait_for(lambda: len(_server_lines(program)) >= 3, 120,
             'the server to save its version inside the job')
    subprocess.run(['scontrol', 'requeue', program.record['job_id']], check=True, timeout=30)
    wait_for(lambda: program.state() == 'pending', 60, 'the job to be requeued')
    _assert_resumes_from_its_last_save(program, at_least=300)


@needs_slurm
@slow
@pytest.mark.timeout(600)
def test_a_parameter_server_near_its_time_limit_resumes_with_its_version_and_params():
    """signal_s before a one-minute limit: the controller requeues the job after the nodes'
    checkpoints, and the server in the next allocation goes on from its last save."""
    slurm_cluster()
    program = lp.submit(SCRIPT, 'param_server', sbatch_args=['--ntasks=2', '--time=1'],
                        name='param_server', requeue=True, signal_s=50)
    wait_for(lambda: 'the time limit is 50 s away' in program.logs(), 120,
             'the warning before the time limit')
    _assert_resumes_from_its_last_save(program, at_least=1)


def _assert_resumes_from_its_last_save(program, at_least: int) -> None:
    """The server's first ``resumed from`` line names at least the last version it saved before
    (``at_least`` or more), it saves a newer one after, and the program stops when asked."""
    lines = wait_for(lambda: _until_resumed(_server_lines(program)), 400,
                     'the server to start again in the requeued job')
    saved_before = max(n for what, n in lines if what == 'saved')
    assert lines[-1][1] >= saved_before >= at_least
    wait_for(lambda: _server_lines(program)[-1][1] > lines[-1][1], 120,
             'the resumed server to save a newer version')
    stopped = cli('stop', program.id)
    assert stopped.returncode == 0, stopped


def _ticking_in_slurm():
    """A ticker submitted with lp.submit, once it ticks; its job's processes."""
    slurm_cluster()
    program = lp.submit(SCRIPT, 'ticker', sbatch_args=['--ntasks=2'], name='ticker')
    wait_for(lambda: ticks(program) >= 1, 90, 'the node to tick inside the job')
    return program, _job_processes(program.record['job_id'])


def _squeue(job: str) -> str:
    return subprocess.run(['squeue', '-h', '-j', job, '-o', '%T'], capture_output=True, text=True,
                          timeout=30).stdout.strip()


def _job_processes(job: str) -> list[psutil.Process]:
    """The job's controller and nodes (every process with its SLURM_JOB_ID), once both run."""
    def find():
        found = []
        for process in psutil.process_iter(['cmdline']):
            try:
                if process.environ().get('SLURM_JOB_ID') == job:
                    found.append(process)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        names = ' '.join(' '.join(p.info['cmdline'] or ()) for p in found)
        return found if 'controller_main' in names and 'remote_node_main' in names else None
    return wait_for(find, 60, f'the controller and nodes of job {job}')


@needs_ssh_hosts
def test_an_ssh_controller_killed_is_restarted_and_its_program_resumes():
    """controller_restarts=1: SIGKILL of the controller on h1 ends its node; the supervising
    process starts the controller again, whose node resumes from its checkpoint; stop ends all."""
    program = lp.submit(SCRIPT, 'resumer', launch_type='ssh', host='h1', ssh_options=SSH_OPTIONS,
                        program_launch_type='local_mp', name='resumer', controller_restarts=1)
    wait_for(lambda: ticks(program) >= 3, 60, 'the node to tick')
    supervisor = psutil.Process(program.record['pid'])
    (controller,) = supervisor.children()
    first = family(controller.pid)
    controller.kill()
    assert_gone(first)
    wait_for(lambda: re.search(r'^\[worker/0\] resumed from [1-9]', program.logs(), re.MULTILINE),
             60, 'the node to resume from its checkpoint')
    assert 'starting it again (0 restart(s) left)' in program.logs()
    assert program.state() == 'running'
    everything = family(supervisor.pid)
    assert program.stop(grace=5) == 'ended'
    assert_gone(everything)


def test_controller_restarts_are_checked():
    """Negative, or on Slurm (whose requeue does it): refused, naming the value."""
    with pytest.raises(lp.ProgramError, match=r'controller_restarts must be a whole number, 0 or '
                                              r'more \(got -1\)'):
        lp.submit(SCRIPT, launch_type='ssh', host='h1', controller_restarts=-1)
    with pytest.raises(lp.ProgramError, match="on Slurm, requeue=True"):
        lp.submit(SCRIPT, launch_type='slurm', controller_restarts=2)


@pytest.mark.skipif(os.getuid() != 0, reason='making a directory of another owner needs root')
def test_list_reads_only_this_users_records(programs_dir):
    """A program directory of another owner: `list` skips it unread, `status` refuses it; a
    programs directory others may enter: `list` refuses it (exit 1), saying how to fix it."""
    programs_dir.mkdir(mode=0o700)
    theirs = programs_dir / 'theirs-000000'
    theirs.mkdir(mode=0o700)
    records.write_private(str(theirs / 'record.json'), json.dumps(
        {'id': 'theirs-000000', 'name': 'theirs', 'launcher': 'ssh', 'started': 0}))
    os.chown(theirs, 65534, 65534)
    listed = cli('list')
    assert listed.returncode == 0 and 'theirs' not in listed.stdout
    status = cli('status', 'theirs-000000')
    assert status.returncode == 1 and 'belongs to uid 65534' in status.stderr
    os.chmod(programs_dir, 0o755)
    listed = cli('list')
    assert listed.returncode == 1 and 'mode at most 0700' in listed.stderr
    assert f'set {records.DIR_ENV} to a directory of your own' in listed.stderr
    os.chmod(programs_dir, 0o700)  # For the fixture's own look at what is left running.


def test_an_endpoint_whose_host_name_does_not_resolve_names_its_route_address(monkeypatch):
    """In a container whose name nothing resolves (podman's host network), the controller's
    endpoint still names an address (its default route's), instead of failing to start."""
    import socket

    from launchpad_py.submission import endpoint
    monkeypatch.delenv('SSH_CONNECTION', raising=False)
    monkeypatch.delenv('SLURMD_NODENAME', raising=False)
    monkeypatch.setattr(socket, 'gethostname', lambda: 'no-such-host.invalid')
    address = endpoint.reachable_address()
    assert socket.inet_aton(address) and address != '0.0.0.0'
