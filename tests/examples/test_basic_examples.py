"""hello_world and producer_consumer run from the command line and under test launchers."""

from __future__ import annotations

import subprocess
import sys

import pytest

import launchpad_py as lp
from conftest import REPO
from examples.producer_consumer.program import expected_total, make_program


@pytest.mark.parametrize('launch_type', ['local_mt', 'local_mp'])
@pytest.mark.parametrize('example', ['hello_world', 'producer_consumer'])
def test_example_runs_from_the_command_line(example, launch_type):
    """python -m examples.<name> --lp_launch_type=... ends by itself with status 0."""
    result = subprocess.run([sys.executable, '-m', f'examples.{example}',
                             f'--lp_launch_type={launch_type}'],
                            capture_output=True, text=True, timeout=90, cwd=REPO)
    assert result.returncode == 0, result.stderr
    expected = 'Hello, world' if example == 'hello_world' else f'total = {expected_total()}'
    assert expected in result.stdout


@pytest.mark.parametrize('launch_type', ['test_mt', 'test_mp'])
def test_producer_consumer_sums_every_producer(launch_type, capfd):
    """Three producers, small chunks: the consumer's total covers every number once."""
    lp.launch(make_program(num_producers=3, size=50, chunk_size=7),
              launch_type=launch_type).wait(timeout=60)
    assert f'total = {expected_total(3, 50)}' in capfd.readouterr().out
