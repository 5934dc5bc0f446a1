"""Elastic groups under Slurm: added nodes are new steps of the job, within the room it holds.

On the test cluster of scripts/slurm_cluster.sh (see tests/test_slurm.py).
"""

from __future__ import annotations

import subprocess

import pytest

import launchpad_py as lp
from conftest import SLURM_LOGS, launch, needs_slurm, slurm_cluster, wait_for
from test_elastic import _program
from test_slurm import _job_of

pytestmark = needs_slurm


@pytest.fixture(autouse=True)
def cluster():
    slurm_cluster()


def _steps(job: str) -> list[str]:
    return sorted(subprocess.run(['squeue', '-h', '-s', '-j', job, '-o', '%j'],
                                 capture_output=True, text=True, timeout=30).stdout.split())


def test_added_nodes_are_new_steps_and_removed_ones_end_theirs():
    """elastic_room=2: two nodes join as steps of the job and the group handle lists them; a
    third is refused naming what to ask for; removing one ends its step and makes room again."""
    program, members, watcher = _program(members=1, name='elastic_slurm')
    with launch(program, 'slurm', slurm_options={'elastic_room': 2, 'steps': 'node',
                                                 'output_dir': SLURM_LOGS}) as controller:
        job = _job_of(controller.statuses()[0].pid)
        added = controller.add_nodes('member', 2, timeout=120)
        assert [s.index for s in added] == [1, 2] and all(s.host.startswith('h') for s in added)
        assert {_job_of(s.pid) for s in added} == {job}
        assert _steps(job) == ['member/0', 'member/1', 'member/2', 'watcher/0']
        wait_for(lambda: len(watcher.dereference().members()['answers']) == 3,
                 what='the watcher to see 3 members')
        with pytest.raises(lp.LaunchError, match=r'no room for it .*elastic_room": 3'):
            controller.add_nodes('member', 1, timeout=60)
        controller.remove_nodes('member', 1, timeout=60)
        wait_for(lambda: _steps(job) == ['member/0', 'member/1', 'watcher/0'],
                 what='the removed node\'s step to end')
        (again,) = controller.add_nodes('member', 1, timeout=120)
        assert _job_of(again.pid) == job and again.state == lp.NodeState.RUNNING


def test_without_room_an_added_node_is_refused_at_once():
    """elastic_room=0 (the default): the job holds no spare task, so add_nodes says what to ask
    for instead of leaving an srun waiting for CPUs."""
    program, _, _ = _program(members=1, name='elastic_no_room')
    with launch(program, 'slurm', slurm_options={'steps': 'node',
                                                 'output_dir': SLURM_LOGS}) as controller:
        with pytest.raises(lp.LaunchError,
                           match=r'cannot add node member/1: Slurm job \d+ has no room .*'
                                 r'elastic_room": 1.*--ntasks'):
            controller.add_nodes('member', 1, timeout=60)
        assert controller.is_running


def test_steps_per_host_cannot_grow_and_says_so_before_submitting():
    """steps='host' gives each host's agent all its CPUs: an elastic group is refused up front."""
    program, _, _ = _program(members=1, name='elastic_host_steps')
    with pytest.raises(lp.ResourcesError, match=r"'host' cannot grow groups \['member'\]"):
        launch(program, 'slurm', slurm_options={'steps': 'host', 'output_dir': SLURM_LOGS})


@pytest.mark.parametrize('room', [-1, True, 1.5])
def test_bad_elastic_room_is_named(room):
    """elastic_room must be an int >= 0; the message names the option and the value."""
    program, _, _ = _program(members=1, name='elastic_bad_room')
    with pytest.raises(lp.ResourcesError, match=rf"elastic_room'\] must be an int >= 0.*{room!r}"):
        launch(program, 'slurm', slurm_options={'elastic_room': room})
