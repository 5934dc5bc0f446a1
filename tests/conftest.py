"""Shared fixtures: every test must leave no node threads and no processes behind."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import threading
import time

import psutil
import pytest

LAUNCH_TYPES = ['local_mt', 'local_mp', 'test_mt', 'test_mp']
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Threads the library starts for a program; long-lived gRPC/channel threads are not ours.
_OURS = ('lp-', 'courier-')
# dm-reverb pins TensorFlow and numpy<2, so its tests run in .venv-reverb (scripts/test.sh does that).
_HAS_REVERB = importlib.util.find_spec('reverb') is not None
collect_ignore = [] if _HAS_REVERB else ['reverb_tests']


def pytest_report_header():
    if not _HAS_REVERB:
        return ('tests/reverb_tests not collected: dm-reverb is not installed in this environment; '
                'scripts/test.sh runs them in .venv-reverb')


def _our_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith(_OURS)}


@pytest.fixture(autouse=True)
def no_leaks():
    """Fails the test if it leaves library threads or child processes running."""
    threads_before = _our_threads()
    children_before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    for thread in _our_threads() - threads_before:
        thread.join(timeout=15)
    leaked_threads = [t.name for t in _our_threads() - threads_before if t.is_alive()]
    children = [p for p in psutil.Process().children(recursive=True)
                if p.pid not in children_before]
    _, alive = psutil.wait_procs(children, timeout=15)
    for process in alive:
        process.kill()
    assert not leaked_threads, f'threads left running: {leaked_threads}'
    assert not alive, f'processes left running: {[p.cmdline() for p in alive]}'


def run_script(source: str, *args: str, timeout: float = 90, **kwargs) -> subprocess.CompletedProcess:
    """Runs ``source`` as a launching script in a fresh interpreter."""
    return subprocess.run([sys.executable, '-c', source, *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, **kwargs)


def wait_for(predicate, timeout: float = 30, what: str = 'condition'):
    """Re-checks ``predicate`` until it returns a truthy value or ``timeout`` passes.

    For conditions no event announces (a file appearing, output arriving); the
    checks are spaced by an Event wait, and the test fails when time runs out.
    """
    pause = threading.Event()
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f'timed out after {timeout}s waiting for {what}')
        pause.wait(0.02)
