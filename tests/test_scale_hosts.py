"""Issue 25's program at 1,000 nodes across hosts: ssh over h1..h3, and one Slurm job.

Minutes and ~10 GiB each: set LP_SCALE_TESTS=1 to run them (figures: bench/scale.py,
docs/performance.md). The default suite's agent tests are in test_ssh_agent.py and
test_slurm.py.
"""

from __future__ import annotations

import os

import pytest

import launchpad_py as lp
from conftest import (SLURM_LOGS, needs_slurm, needs_ssh_hosts, read_on_host, slurm_cluster,
                      ssh_host)
from scale_nodes import fan_out_program

pytestmark = pytest.mark.skipif(os.environ.get('LP_SCALE_TESTS') != '1',
                                reason='1,000-node run; set LP_SCALE_TESTS=1 to include it')


def _answers(program: lp.Program, answers, host: str | None = None, **launch_args) -> str:
    """What the caller wrote, read on its ``host`` (over ssh for a share-nothing one)."""
    controller = lp.launch(program, **launch_args)
    controller.wait(timeout=600)
    return read_on_host(host, str(answers)) if host else answers.read_text()


@needs_ssh_hosts
def test_1000_nodes_over_three_ssh_hosts(tmp_path):
    """1,000 counters over h1..h3 (one ssh session each) and one caller: every node answers."""
    answers = tmp_path / 'answers'
    program = fan_out_program(1000, str(answers))
    hosts = [ssh_host(name) for name in ('h1', 'h2', 'h3')]
    assert _answers(program, answers, hosts[0].host, launch_type='ssh',
                    resources={'counter': hosts, 'caller': hosts[0]}) == '1000\n'


@needs_slurm
def test_1000_nodes_in_one_slurm_job_with_a_step_per_host(tmp_path):
    """1,000 counters and one caller in one Slurm job over h1..h3 (tasks share the 48 CPUs)."""
    slurm_cluster()
    answers = tmp_path / 'answers'
    program = fan_out_program(1000, str(answers))
    assert _answers(program, answers, launch_type='slurm', slurm_options={
        'steps': 'host', 'extra_args': ['--overcommit', '--nodes=3'],
        'output_dir': SLURM_LOGS}) == '1000\n'
