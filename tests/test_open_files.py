"""File descriptors: launchers and nodes raise their soft open-file limit; a short hard
limit is reported with its value."""

from __future__ import annotations

import resource

from conftest import run_script

# Sets this launcher's RLIMIT_NOFILE to (SOFT, HARD), then runs PROGRAM.
_SCRIPT = '''
import resource, sys
sys.path.insert(0, "tests")
import launchpad_py as lp
import open_files_nodes
soft, hard, program = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
lp.launch(eval("open_files_nodes." + program), launch_type="test_mp").wait(timeout=120)
'''
_HARD = resource.getrlimit(resource.RLIMIT_NOFILE)[1]


def test_many_connections_to_one_server_under_a_low_soft_limit(tmp_path):
    """300 connections at once to one server work though the launcher's soft limit is 128."""
    result = tmp_path / 'met'
    done = run_script(_SCRIPT, '128', str(_HARD), f'meeting_program(300, {str(result)!r})',
                      timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert result.read_text() == '300'


def test_a_server_out_of_descriptors_names_the_limit(tmp_path):
    """When even the hard limit is short, the server says so with RLIMIT_NOFILE's value."""
    result = tmp_path / 'met'
    # The meeting never fills; its barrier gives up after 3 s, long after the 300 callers
    # have run the server out of descriptors (the first ~100 connections do).
    done = run_script(_SCRIPT, '100', '100', f'meeting_program(300, {str(result)!r}, 3)',
                      timeout=180)
    assert done.returncode != 0
    assert ('[meeting/0] courier server meeting/0 cannot accept a same-host connection: out of '
            'file descriptors: the open-file limit (RLIMIT_NOFILE) of this process is 100, '
            'hard 100' in done.stdout + done.stderr), done.stderr[-3000:]
    assert not result.exists()


def test_a_launch_beyond_the_hard_limit_is_refused_naming_it():
    """A launch that needs more descriptors than the hard limit allows fails before starting."""
    done = run_script(_SCRIPT, '100', '100', 'counters_program(50)', timeout=120)
    assert done.returncode != 0
    assert ("LaunchError: test_mp program 'many' of 50 nodes needs about 264 file descriptors, "
            'but the open-file limit (RLIMIT_NOFILE) of this process is 100, hard 100'
            in done.stderr), done.stderr[-3000:]


_FAILED_GRPC_START = '''
import os
from launchpad_py.courier import open_files
count = lambda: len(os.listdir('/proc/self/fd'))
before = count()
open_files.hold_reserve()
held = count()
try:
    with open_files.starting_grpc():
        during = count()
        raise RuntimeError('gRPC could not start')
except RuntimeError:
    pass
print(before, held, during, count())
'''


def test_a_failed_grpc_start_keeps_the_reserve_for_its_next_try():
    """The descriptors kept for gRPC are free inside ``starting_grpc`` and kept again when
    the start fails, so the retry a moment later starts on them too."""
    done = run_script(_FAILED_GRPC_START)
    assert done.returncode == 0, done.stderr[-3000:]
    before, held, during, after = map(int, done.stdout.split())
    assert held > before + 16
    assert during == before
    assert after == held


_FORK_WHILE_GRPC_STARTS = '''
import os, signal
from launchpad_py.courier import open_files
with open_files.starting_grpc():
    child = os.fork()
    if child == 0:  # Another thread of the parent held the lock: here it is free.
        signal.alarm(20)  # Should it not be, this child does not outlive the test.
        with open_files.taking_descriptors():
            os._exit(7)
print(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]))
'''


def test_a_child_forked_while_grpc_starts_can_take_descriptors():
    """The lock held while gRPC starts is not inherited held by a forked child."""
    done = run_script(_FORK_WHILE_GRPC_STARTS, timeout=30)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ['7']
