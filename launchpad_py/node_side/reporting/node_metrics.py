"""What a running node says about itself when its launcher asks: calls, latency, memory, CPU.

The node's process answers a ``('metrics', request_id)`` message on its control
channel with ``collect()`` (see ``node_process``); a ``local_mt`` node thread is
read in place with ``collect(owner_thread=...)``. Nothing here needs more than
the standard library, so every node can answer.

    collect()['methods']['echo']   # {'calls': 10, 'errors': 0, 'mean_s': ..., 'p99_s': ...}
"""

from __future__ import annotations

import math
import os
import time

from launchpad_py.courier import stats as courier_stats

_PAGE = os.sysconf('SC_PAGE_SIZE') if hasattr(os, 'sysconf') else 4096


def collect(owner_thread: int | None = None) -> dict:
    """This process's counters; only servers made by ``owner_thread`` when one is given."""
    servers = [s for s in courier_stats.live_servers()
               if owner_thread is None or s.owner_thread == owner_thread]
    snapshots = [s.snapshot() for s in servers]
    methods: dict[str, dict] = {}
    for snapshot in snapshots:
        for name, m in snapshot['methods'].items():
            merged = methods.setdefault(name, {'calls': 0, 'errors': 0, 'timed': 0,
                                               'total_s': 0.0, 'bytes_in': 0, 'recent': []})
            for key in ('calls', 'errors', 'timed', 'total_s', 'bytes_in'):
                merged[key] += m[key]
            merged['recent'].extend(m['recent'])
    times = os.times()
    return {
        'time': time.time(),
        'pid': os.getpid(),
        'methods': {name: _summary(m) for name, m in sorted(methods.items())},
        'in_flight': sum(s['in_flight'] for s in snapshots),
        'bytes_in': sum(m['bytes_in'] for m in methods.values()),
        'bytes_out': sum(s['bytes_out'] for s in snapshots),
        'rss_bytes': rss_bytes(),
        'cpu_s': times.user + times.system,
        # Several nodes in one process (local_mt) share its memory and CPU figures.
        'shared_process': owner_thread is not None,
    }


def _summary(m: dict) -> dict:
    """Counts since start; mean and p99 over the recent timed calls (a slow warm-up fades out)."""
    recent = sorted(m['recent'])
    return {'calls': m['calls'], 'errors': m['errors'], 'bytes_in': m['bytes_in'],
            'timed': m['timed'], 'total_s': m['total_s'],
            'mean_s': sum(recent) / len(recent) if recent else 0.0,
            'p99_s': percentile(recent, 0.99)}


def percentile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of sorted values (nearest rank); 0.0 for none."""
    if not ordered:
        return 0.0
    rank = max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))
    return ordered[rank]


def rss_bytes() -> int:
    """Resident memory of this process now (Linux), else its peak."""
    try:
        with open('/proc/self/statm') as statm:
            return int(statm.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
