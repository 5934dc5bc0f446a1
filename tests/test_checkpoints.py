"""Checkpoints as a node service: a directory per node that outlives its process, and a hook
that runs before a planned stop (node_side/checkpoints.py)."""

from __future__ import annotations

import json
import os
import pickle
import signal

import pytest

import launchpad_py as lp
from checkpoint_nodes import Tally
from conftest import (SLURM_LOGS, launch, needs_ray, needs_slurm, needs_ssh_hosts, read_on_host,
                      ssh_host, wait_for)


def _program(name='tallies'):
    program = lp.Program(name)
    handle = program.add_node(lp.CourierNode(Tally), label='tally')
    return program, handle


def _saved(handle_dir, host='here'):
    """What the tally saved, read on the host it ran on (it may share nothing with us)."""
    return json.loads(read_on_host(host, os.path.join(handle_dir, 'tally.json')))


@pytest.mark.parametrize('launch_type', [
    'local_mt', 'local_mp', pytest.param('ssh', marks=needs_ssh_hosts)])
def test_checkpoint_method_runs_before_the_stop_and_a_new_launch_resumes(
        tmp_path, monkeypatch, launch_type):
    """checkpoint() runs on a planned stop before the stop handlers and the stop event; with
    LAUNCHPAD_PY_CHECKPOINT_DIR the same, the next launch starts from what it saved."""
    monkeypatch.setenv('LAUNCHPAD_PY_CHECKPOINT_DIR', str(tmp_path))
    program, handle = _program()
    with launch(program, launch_type) as controller:  # ssh: on h1 (or p1, sharing nothing).
        where = handle.dereference().where()['dir']
        assert handle.dereference().add(5) == 5
        (host,) = {s.host for s in controller.statuses()}
    assert where == str(tmp_path / 'tallies' / 'tally' / '0')
    saved = _saved(where, host or 'here')
    assert saved == {'count': 5, 'by_hook': True, 'stop_event_set': False,
                     'stop_handler_ran': False}
    program, handle = _program()
    with launch(program, launch_type):
        assert handle.dereference().add(1) == 6


def test_restarted_node_finds_its_checkpoint_in_the_same_directory(tmp_path, monkeypatch):
    """Without the variable: a private directory of the launch under ~/.launchpad_py, the same
    after a SIGKILL and lp.Restart, so the restarted node resumes from its last save."""
    monkeypatch.delenv('LAUNCHPAD_PY_CHECKPOINT_DIR', raising=False)
    monkeypatch.setenv('HOME', str(tmp_path))  # The test's own home: nothing left in the user's.
    program, handle = _program('restarted')
    with lp.launch(program, launch_type='local_mp', failure_policy={
            'tally': lp.Restart(max_restarts=2, backoff=(0.05, 0.2))}) as controller:
        client = handle.dereference()
        client.add(3)
        before = client.where()
        assert before['dir'].startswith(str(tmp_path / '.launchpad_py' / 'checkpoints' /
                                            'restarted-'))
        made = before['dir']
        while made != str(tmp_path):  # Each directory it made, up to ~/.launchpad_py.
            assert oct(os.stat(made).st_mode & 0o777) == '0o700', made
            made = os.path.dirname(made)
        os.kill(before['pid'], signal.SIGKILL)
        wait_for(lambda: controller.statuses()[0].restarts == 1
                 and controller.statuses()[0].state == lp.NodeState.RUNNING,
                 what='the restart of tally/0')
        after = client.where()
        assert after['pid'] != before['pid'] and after['dir'] == before['dir']
        assert client.count() == 3
    # The launch's own directory could serve only its restarts: it goes with the program.
    assert not (tmp_path / '.launchpad_py' / 'checkpoints').exists() or not os.listdir(
        tmp_path / '.launchpad_py' / 'checkpoints')


def test_sigterm_from_a_scheduler_runs_the_checkpoint_first(tmp_path, monkeypatch):
    """SIGTERM to a node process (a preemption notice) runs its checkpoint() before it stops."""
    monkeypatch.setenv('LAUNCHPAD_PY_CHECKPOINT_DIR', str(tmp_path))
    program, handle = _program('preempted')
    controller = lp.launch(program, launch_type='local_mp')
    try:
        client = handle.dereference()
        client.add(2)
        where = client.where()
        os.kill(where['pid'], signal.SIGTERM)
        controller.wait(timeout=30)
    finally:
        controller.stop()
    assert _saved(where['dir'])['by_hook'] is True


def test_checkpoint_dir_outside_a_node_is_a_clear_error():
    with pytest.raises(lp.ProgramError, match='for code running in a node'):
        lp.checkpoint_dir()


def _saved_step(path) -> int:
    """The step in the learner's checkpoint file (0 before its first); it is replaced whole."""
    try:
        with open(path, 'rb') as f:
            return pickle.load(f)['step']
    except FileNotFoundError:
        return 0


@pytest.mark.timeout(660)  # Its own waits allow 300 s each: a loaded machine compiles slowly.
def test_actor_learner_learner_resumes_after_sigkill_with_its_step_and_return(
        tmp_path, monkeypatch):
    """The example's learner checkpoints every few steps; SIGKILLed under lp.Restart, the new
    learner starts from the last save: its step, env steps and recent return, not from zero
    (a fresh learner needs seconds to compile before its first step: one batch size,
    ``batch_growth=1``, so one compile per start, not four)."""
    from examples.actor_learner.program import Config, make_program
    monkeypatch.setenv('LAUNCHPAD_PY_CHECKPOINT_DIR', str(tmp_path))
    config = Config(num_actors=2, checkpoint_every=5, batch_growth=1, target_return=10_000.0,
                    eval_interval_s=3600.0)
    program = make_program(config)
    learner = next(n for n in program.get_all_nodes() if n.label == 'learner').create_handle()
    saved_path = tmp_path / 'actor_learner' / 'learner' / '0' / 'learner.pkl'
    with lp.launch(program, launch_type='local_mp', failure_policy={
            'learner': lp.Restart(max_restarts=1, backoff=(0.05, 0.2))}) as controller:
        # The learner counts a step before it saves it: wait for the file, not the count.
        wait_for(lambda: _saved_step(saved_path) >= 10, timeout=300,
                 what='the learner to save its 10th step')
        client = learner.dereference()
        status = next(s for s in controller.statuses() if s.label == 'learner')
        os.kill(status.pid, signal.SIGKILL)
        with open(saved_path, 'rb') as f:
            saved = pickle.load(f)  # Written by the learner; nothing writes it now.
        assert saved['step'] >= 10 and saved['step'] % 5 == 0
        wait_for(lambda: next(s for s in controller.statuses() if s.label == 'learner').restarts
                 == 1, timeout=300, what='the restart of the learner')
        progress = client.progress()
        assert progress['step'] >= saved['step']
        assert progress['env_steps'] >= saved['env_steps'] > 0
        assert progress['train_return'] is not None


@pytest.mark.parametrize('launch_type, options', [
    pytest.param('ssh', {}, marks=needs_ssh_hosts, id='ssh'),
    pytest.param('slurm', {'steps': 'node'}, marks=needs_slurm, id='slurm-step-per-node'),
    pytest.param('slurm', {'steps': 'host'}, marks=needs_slurm, id='slurm-step-per-host'),
    pytest.param('ray', {}, marks=needs_ray, id='ray'),
])
def test_remote_launch_removes_its_private_checkpoint_directory_at_the_end(
        launch_type, options, monkeypatch):
    """Without the variable, the launch's private directory on a remote host goes when the
    program ends (ssh: the host's agent removes it; slurm: the host's agent step, or one last
    step per host; ray: a Ray task on each Ray node it used), and it was there, with the
    node's save, while the program ran."""
    monkeypatch.delenv('LAUNCHPAD_PY_CHECKPOINT_DIR', raising=False)
    program, handle = _program(f'remote_private_{launch_type}_{options.get("steps", "")}')
    kwargs = {'slurm_options': {**options, 'output_dir': SLURM_LOGS}} if options else {}
    # The one group runs on h1 (ssh: p1 with LP_SSH_TEST_HOSTS=p, which shares nothing).
    host = ssh_host('h1').host if launch_type == 'ssh' else 'here'
    with launch(program, launch_type, **kwargs):
        client = handle.dereference()
        client.add(2)
        node_dir = client.where()['dir']
        assert _saved(node_dir, host)['count'] == 2
    private_root = os.path.dirname(os.path.dirname(node_dir))
    assert os.path.basename(private_root).startswith(program.name + '-')
    with pytest.raises(FileNotFoundError):
        read_on_host(host, os.path.join(node_dir, 'tally.json'))
    assert not os.path.exists(private_root), os.listdir(private_root)
