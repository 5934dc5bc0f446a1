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


# program_wait.py has a node that ignores the stop. A thread cannot be killed, so under
# local_mt the launching process ends itself after the grace period, as the original's does.
STUCK_UNDER_THREADS = {'program_wait.py'}
# program_wait.py waits out the grace for its stubborn node twice (it launches two programs);
# the nodes that heed the stop print at once, so a second is plenty.
GRACE_S = 1


def _run_example(script: str, launch_type: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, '-m', 'launchpad_py.compat', os.path.join(HERE, script),
         f'--lp_launch_type={launch_type}', f'--lp_termination_notice_secs={GRACE_S}'],
        capture_output=True, text=True, timeout=120, cwd=REPO)


@pytest.mark.parametrize('script, launch_type', [
    (script, launch_type) for script in sorted(EXAMPLES) for launch_type in ('local_mt', 'local_mp')
    if not (launch_type == 'local_mt' and script in STUCK_UNDER_THREADS)])
def test_original_example_runs_unmodified(script, launch_type):
    """`python -m launchpad_py.compat script.py` runs `import launchpad` code and exits 0."""
    result = _run_example(script, launch_type)
    assert result.returncode == 0, result.stderr[-3000:]
    for expected in EXAMPLES[script]:
        assert expected in result.stdout, result.stdout[-3000:]


def test_original_example_with_a_stuck_thread_exits_137():
    """Under local_mt a node ignoring the stop ends the launcher with 137, as in the original."""
    result = _run_example('program_wait.py', 'local_mt')
    assert result.returncode == 137, result.stderr[-3000:]
    assert f'stubborn/0 did not end within the {GRACE_S}s grace period' in result.stderr
    assert 'in ignore_the_stop' in result.stderr
    for expected in EXAMPLES['program_wait.py'][:3]:
        assert expected in result.stdout, result.stdout[-3000:]
    assert 'program finished' not in result.stdout


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
