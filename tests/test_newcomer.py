"""A newcomer's first hour (issue 30): quiet clean stops, errors that blame the right node."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

SCRIPTS = os.path.join(REPO, 'tests', 'scripts')


def _run(script: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, os.path.join(SCRIPTS, script), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=REPO)


@pytest.mark.parametrize('launch_type', ['local_mt', 'local_mp', 'test_mp'])
def test_calls_cut_by_the_stop_end_quietly(launch_type):
    """Actors whose calls meet a learner already stopped end quietly: exit 0, status stopped."""
    result = _run('getting_started.py', launch_type)
    assert result.returncode == 0, result.stderr
    assert 'Traceback' not in result.stdout + result.stderr, result.stderr
    assert 'CourierUnavailableError' not in result.stderr, result.stderr
    statuses = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(statuses) == 5
    for label, index, state, exit_code in statuses:
        assert state in ('stopped', 'finished'), (label, index, state)
        assert exit_code in (0, None), (label, index, exit_code)
