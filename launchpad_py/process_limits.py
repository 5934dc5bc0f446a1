"""Processes and threads: name the limit that ran out when a launch cannot start one.

Every thread counts against the kernel's ``kernel.pid_max`` and ``kernel.threads-max``,
its user's ``RLIMIT_NPROC`` and its cgroup's ``pids.max``; a ``local_mp`` node is a process
of several threads, so a few thousand nodes reach the defaults (32,768 pids: the first
2,000-node launch ran out). Python says only "can't start new thread", and a fork
"[Errno 11] Resource temporarily unavailable"; a launch that hits either says which
limits apply, with their values, instead.

    if process_limits.is_exhausted(exc):
        raise LaunchError(process_limits.exhausted('launching 2000 nodes')) from exc
"""

from __future__ import annotations

import errno
import os
import resource

_MARKS = ("can't start new thread", 'fork failed: [Errno 11]')


def is_exhausted(exc: BaseException) -> bool:
    """Whether ``exc`` says no thread or process could be started."""
    if isinstance(exc, OSError):
        return exc.errno == errno.EAGAIN
    return isinstance(exc, RuntimeError) and _MARKS[0] in str(exc)


def mentions_exhaustion(text: str) -> bool:
    """Whether a node's output or traceback says it could not start a thread or process."""
    return any(mark in text for mark in _MARKS)


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _cgroup_pids() -> str | None:
    """``pids.max`` and ``pids.current`` of this process's cgroup (v2, else v1's pids)."""
    for line in (_read('/proc/self/cgroup') or '').splitlines():
        _, controllers, path = line.split(':', 2)
        base = ('/sys/fs/cgroup/pids' if controllers == 'pids' else
                '/sys/fs/cgroup' if controllers == '' else None)
        if base is None:
            continue
        limit = _read(f'{base}{path}/pids.max')
        if limit is not None and limit != 'max':
            return f'cgroup pids.max {limit} (in use {_read(f"{base}{path}/pids.current")})'
    return None


def describe() -> str:
    """The limits on threads and processes that apply here, with their values."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)

    def text(value: int) -> str:
        return 'unlimited' if value == resource.RLIM_INFINITY else str(value)
    threads_now = (_read('/proc/loadavg') or '? ? ? ?/?').split()[3].split('/')[1]
    parts = [f'kernel.pid_max {_read("/proc/sys/kernel/pid_max")}',
             f'kernel.threads-max {_read("/proc/sys/kernel/threads-max")}',
             f'RLIMIT_NPROC {text(soft)} (hard {text(hard)}'
             f'{"; not enforced for root" if os.geteuid() == 0 else ""})',
             _cgroup_pids(), f'threads on the machine now {threads_now}']
    return ', '.join(part for part in parts if part)


def exhausted(what: str) -> str:
    """The message for running out of threads or processes while doing ``what``."""
    return (f'{what}: out of threads or processes (every thread counts): {describe()}. '
            'Raise the limit that is reached (sysctl -w kernel.pid_max=..., ulimit -u, the '
            "cgroup's pids.max, TasksMax= for a systemd service) or launch fewer nodes per "
            'machine')
