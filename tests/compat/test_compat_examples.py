"""Programs written for DeepMind Launchpad run unmodified through the compatibility runner."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import REPO

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = {
    'hello_world.py': ['Hello from a Launchpad node'],
    'consumer_producers.py': ['consumer totals [30, 60, 90, 120, 150]'],
    'batching.py': ['caller 0 done', 'caller 1 done', 'caller 2 done'],
    'program_wait.py': ['poll_wait_for_stop ended cleanly', 'wait_for_stop ended cleanly',
                        'stop_event ended cleanly', 'program finished (1)'],
}


@pytest.mark.parametrize('launch_type', ['local_mt', 'local_mp'])
@pytest.mark.parametrize('script', sorted(EXAMPLES))
def test_original_example_runs_unmodified(script, launch_type):
    """`python -m launchpad_py.compat script.py` runs `import launchpad` code and exits 0."""
    result = subprocess.run(
        [sys.executable, '-m', 'launchpad_py.compat', os.path.join(HERE, script),
         f'--lp_launch_type={launch_type}', '--lp_termination_notice_secs=2'],
        capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    for expected in EXAMPLES[script]:
        assert expected in result.stdout, result.stdout[-3000:]


def test_module_form_of_the_runner():
    """`python -m launchpad_py.compat -m package.module` runs a module the same way."""
    result = subprocess.run(
        [sys.executable, '-m', 'launchpad_py.compat', '-m', 'hello_world',
         '--lp_launch_type=local_mp'],
        capture_output=True, text=True, timeout=120, cwd=REPO,
        env={**os.environ, 'PYTHONPATH': HERE})
    assert result.returncode == 0, result.stderr[-3000:]
    assert 'Hello from a Launchpad node' in result.stdout


def test_runner_without_arguments_prints_usage():
    """A bare runner call explains how to use it and fails."""
    result = subprocess.run([sys.executable, '-m', 'launchpad_py.compat'],
                            capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 1
    assert 'usage: python -m launchpad_py.compat' in result.stderr
