"""A launch that runs out of threads or processes fails at once, naming the limit.

Provoked with a pids cgroup (cgroup v1's pids controller or v2) capping a
launching process and its children at 120 threads, well under what 40
local_mp nodes need: it needs root and a writable cgroup file system.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from launchpad_py import process_limits

LAUNCH = '''
import sys
import time
import launchpad_py as lp
sys.path.insert(0, sys.argv[1])
from scale_nodes import Counter
program = lp.Program('capped')
with program.group('counter'):
    for _ in range(40):
        program.add_node(lp.CourierNode(Counter))
try:
    lp.launch(program, launch_type='local_mp').stop()
except lp.LaunchError as exc:
    print('LaunchError:', exc)
'''


def _pids_cgroup(limit: int) -> str | None:
    """A fresh cgroup capped at ``limit`` pids, or None where none can be made here."""
    for base in ('/sys/fs/cgroup/pids', '/sys/fs/cgroup/unified', '/sys/fs/cgroup'):
        path = os.path.join(base, f'lp-test-{uuid.uuid4().hex[:8]}')
        try:
            os.mkdir(path)
        except OSError:
            continue
        try:
            with open(os.path.join(path, 'pids.max'), 'w') as f:
                f.write(str(limit))
            return path
        except OSError:
            os.rmdir(path)
    return None


def _empty_and_remove(cgroup: str, timeout: float = 30.0) -> list[str]:
    """Removes ``cgroup`` once its processes are gone; those still there after ``timeout``
    (killed then) are returned."""
    procs = os.path.join(cgroup, 'cgroup.procs')
    deadline = time.monotonic() + timeout
    while True:
        with open(procs) as f:
            left = f.read().split()
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)  # Polling the kernel's list: nothing to wait on.
    for pid in left:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.rmdir(cgroup)
            return left
        except OSError:  # Busy until the killed ones are reaped.
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_a_launch_out_of_threads_names_the_limit():
    """40 local_mp nodes under a cgroup's pids.max of 120: a LaunchError that names
    pids.max and its value, well within the timeout (no hang)."""
    cgroup = _pids_cgroup(120)
    if cgroup is None:
        pytest.skip('no pids cgroup can be made here (needs root and a cgroup file system)')
    try:
        def enter_cgroup() -> None:
            with open(os.path.join(cgroup, 'cgroup.procs'), 'w') as f:
                f.write(str(os.getpid()))

        done = subprocess.run(
            [sys.executable, '-c', LAUNCH, os.path.dirname(__file__)], capture_output=True,
            text=True, timeout=120, preexec_fn=enter_cgroup)
    finally:
        left = _empty_and_remove(cgroup)
    assert 'LaunchError:' in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    assert 'out of threads or processes' in done.stdout
    assert 'pids.max 120' in done.stdout
    assert not left, f'processes of the failed launch still running: {left}'


def test_exhaustion_is_told_from_other_errors():
    """Only "can't start new thread" and EAGAIN count as running out."""
    assert process_limits.is_exhausted(RuntimeError("can't start new thread"))
    assert process_limits.is_exhausted(BlockingIOError(11, 'Resource temporarily unavailable'))
    assert not process_limits.is_exhausted(RuntimeError('something else'))
    assert not process_limits.is_exhausted(OSError(24, 'Too many open files'))
