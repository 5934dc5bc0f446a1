"""Programs of hundreds (and, opt-in, thousands) of nodes launch, answer and stop.

The 1,000-node runs take minutes and most of a small machine's memory: set
LP_SCALE_TESTS=1 to run them.
"""

from __future__ import annotations

import os

import pytest

import launchpad_py as lp
from scale_nodes import fan_out_program

big = pytest.mark.skipif(os.environ.get('LP_SCALE_TESTS') != '1',
                         reason='1,000-node run; set LP_SCALE_TESTS=1 to include it')


def _launch_and_count_answers(nodes: int, launch_type: str, tmp_path) -> None:
    answers = tmp_path / 'answers'
    program = fan_out_program(nodes, str(answers))
    controller = lp.launch(program, launch_type=launch_type)
    controller.wait(timeout=600)
    assert answers.read_text() == f'{nodes}\n'


def test_300_nodes_launch_answer_and_stop_on_local_mp(tmp_path):
    """300 courier nodes and one caller on local_mp: every node binds, answers once, stops."""
    _launch_and_count_answers(300, 'local_mp', tmp_path)


@big
@pytest.mark.parametrize('launch_type', ['local_mp', 'local_mt'])
def test_1000_nodes_launch_answer_and_stop(launch_type, tmp_path):
    """1,000 courier nodes and one caller: every node answers once and the program stops."""
    _launch_and_count_answers(1000, launch_type, tmp_path)
