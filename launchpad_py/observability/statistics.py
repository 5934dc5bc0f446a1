"""Live per-node statistics of a running program, for every launcher.

The controller knows each node's state, host, pid, restarts and failure; the
node knows its calls, latency, bytes, memory and CPU (``node_metrics``). A
``Monitor`` asks every live node at once, joins both, and turns counters into
rates against an earlier sample, so any number of readers (``lp status``, the
dashboard) can poll without disturbing each other's rates::

    for node in controller.statistics():
        print(node.name, node.state, node.calls, node.calls_per_s)
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import threading
import time

from launchpad_py.node_state import ENDED as _ENDED, NodeState
#: Rates are taken over at least this many seconds, when the history allows.
RATE_WINDOW_S = 1.0
#: Samples kept per node for the dashboard's plots (one per ``SAMPLE_SPACING_S`` at most).
HISTORY = 120
SAMPLE_SPACING_S = 0.5


@dataclasses.dataclass
class MethodStatistics:
    """One served method: calls, failed calls and bytes in since start (exact); latency of
    the timed sample of its calls (see ``courier/stats.py``): ``timed`` calls took
    ``total_s`` in all, and the last ``RECENT_CALLS`` of them have this mean and p99."""

    name: str
    calls: int
    errors: int
    mean_s: float
    p99_s: float
    bytes_in: int
    timed: int
    total_s: float


@dataclasses.dataclass
class NodeStatistics:
    """What is known of one node now. Counters are None until the node first answered."""

    label: str
    index: int
    state: NodeState
    host: str
    pid: int | None
    uptime_s: float
    restarts: int
    exit_code: int | None
    last_error: str | None
    traceback: str | None
    calls: int | None = None
    calls_per_s: float | None = None
    in_flight: int | None = None
    bytes_in: int | None = None
    bytes_out: int | None = None
    rss_bytes: int | None = None
    cpu_percent: float | None = None
    shared_process: bool = False
    #: Restarts by why (see ``NodeStatus.restart_reasons``).
    restart_reasons: dict[str, int] = dataclasses.field(default_factory=dict)
    methods: list[MethodStatistics] = dataclasses.field(default_factory=list)

    @property
    def name(self) -> str:
        return f'{self.label}/{self.index}'

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data['state'] = self.state.value
        data['name'] = self.name
        return data


class Monitor:
    """Samples a program's workers; keeps each node's recent history."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[str, dict] = {}  # The latest counters each node reported.
        self._history: dict[str, collections.deque] = {}

    def sample(self, workers: list, timeout: float = 2.0) -> list[NodeStatistics]:
        """Statistics of ``workers``; nodes that do not answer within ``timeout`` keep old counters."""
        futures = {w.name: w.request_metrics() for w in workers if w.state not in _ENDED}
        deadline = time.monotonic() + timeout
        answers: dict[str, dict] = {}
        for name, future in futures.items():
            if future is None:
                continue
            try:
                answers[name] = future.result(max(0.0, deadline - time.monotonic()))
            except (concurrent.futures.TimeoutError, ConnectionError):
                pass
        now = time.time()
        with self._lock:
            return [self._node(w, answers.get(w.name), now) for w in workers]

    def history(self, name: str) -> list[dict]:
        """Recent samples of node ``name``: time, calls/s, in flight, RSS, CPU %."""
        with self._lock:
            return list(self._history.get(name, ()))

    def _node(self, worker, counters: dict | None, now: float) -> NodeStatistics:
        started, ended = worker.started_at, worker.ended_at
        failure = worker.failure
        node = NodeStatistics(
            worker.label, worker.index, worker.state, worker.host, worker.pid,
            uptime_s=((ended or now) - started) if started else 0.0,
            restarts=getattr(worker, 'restarts', 0), exit_code=worker.exit_code,
            last_error=failure.summary if failure else None,
            traceback=failure.traceback if failure else None,
            restart_reasons=dict(getattr(worker, 'restart_reasons', {})))
        if counters is None:
            counters = self._last.get(worker.name)
            if counters is None:
                return node
        else:
            counters = self._remember(worker.name, counters, started)
        self._fill(node, counters)
        return node

    def _remember(self, name: str, counters: dict, started: float | None) -> dict:
        """``counters`` with rates added; kept as the node's latest, and in its history."""
        history = self._history.setdefault(name, collections.deque(maxlen=HISTORY))
        calls = sum(m['calls'] for m in counters['methods'].values())
        if history and (calls < history[-1]['calls'] or counters['cpu_s'] < history[-1]['cpu_s']):
            history.clear()  # A new process (a restart): rates start again from its start.
        point = {'t': counters['time'], 'calls': calls, 'cpu_s': counters['cpu_s']}
        base = _base(history, point['t'], started)
        span = point['t'] - base['t']
        point['calls_per_s'] = (calls - base['calls']) / span if span > 0 else 0.0
        point['cpu_percent'] = 100 * (point['cpu_s'] - base['cpu_s']) / span if span > 0 else 0.0
        if counters['shared_process'] and not history:
            # The process's CPU time since the node started is unknown: no figure yet.
            point['cpu_percent'] = None
        point['in_flight'] = counters['in_flight']
        point['rss_bytes'] = counters['rss_bytes']
        counters = dict(counters, calls=calls, calls_per_s=point['calls_per_s'],
                        cpu_percent=point['cpu_percent'])
        self._last[name] = counters
        if not history or point['t'] - history[-1]['t'] >= SAMPLE_SPACING_S:
            history.append(point)
        return counters

    @staticmethod
    def _fill(node: NodeStatistics, counters: dict) -> None:
        node.calls, node.calls_per_s = counters['calls'], counters['calls_per_s']
        node.in_flight, node.cpu_percent = counters['in_flight'], counters['cpu_percent']
        node.bytes_in, node.bytes_out = counters['bytes_in'], counters['bytes_out']
        node.rss_bytes, node.shared_process = counters['rss_bytes'], counters['shared_process']
        node.pid = node.pid or counters['pid']
        node.methods = [MethodStatistics(name, **m) for name, m in counters['methods'].items()]


def _base(history: collections.deque, now: float, started: float | None) -> dict:
    """The sample to take rates against: the newest one at least RATE_WINDOW_S old.

    Without one, the oldest sample; without any, the node's start (zero counters).
    """
    for point in reversed(history):
        if now - point['t'] >= RATE_WINDOW_S:
            return point
    if history:
        return history[0]
    return {'t': started if started else now, 'calls': 0, 'cpu_s': 0.0}
