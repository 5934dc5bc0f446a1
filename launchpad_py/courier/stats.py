"""Per-method counters of a courier server: what a status page shows about a node.

Every ``Server`` keeps a ``ServerStats``; ``live_servers()`` lists those of the
servers running in this process, so a node's runtime can report them without
knowing which servers its node made::

    server.stats.snapshot()   # {'methods': {'echo': {'calls': 3, ...}}, 'in_flight': 0, ...}

The hot path is one lock taken twice per call (start and end), a clock read at
each, and a bounded ring of recent latencies per method (the p99 is computed
when someone asks, not per call).
"""

from __future__ import annotations

import collections
import threading
import time
import weakref

#: Recent latencies kept per method, for the p99 (a window, not the whole run).
RECENT_CALLS = 1024

_clock = time.perf_counter


class _Method:
    __slots__ = ('calls', 'errors', 'total_s', 'bytes_in', 'recent')

    def __init__(self) -> None:
        self.calls = self.errors = self.bytes_in = 0
        self.total_s = 0.0
        self.recent: collections.deque[float] = collections.deque(maxlen=RECENT_CALLS)


class ServerStats:
    """Calls served, in flight, latency and bytes of one server.

    ``owner_thread`` is the thread that made the server: where several nodes
    share a process (``local_mt``), it tells whose server this is.
    """

    def __init__(self, label: str | None) -> None:
        self.label = label
        self.owner_thread = threading.get_ident()
        self.in_flight = 0
        self.bytes_out = 0
        self._methods: dict[str, _Method] = {}
        self._lock = threading.Lock()

    def begin(self) -> float:
        """Counts a call as in flight; returns its start time for ``end``."""
        with self._lock:
            self.in_flight += 1
        return _clock()

    def end(self, method: str, start: float, bytes_in: int, ok: bool) -> None:
        elapsed = _clock() - start
        with self._lock:
            self.in_flight -= 1
            record = self._methods.get(method)
            if record is None:
                record = self._methods[method] = _Method()
            record.calls += 1
            record.total_s += elapsed
            record.bytes_in += bytes_in
            record.recent.append(elapsed)
            if not ok:
                record.errors += 1

    def sent(self, nbytes: int) -> None:
        """Counts a reply's bytes (the transports call this after sending it)."""
        with self._lock:
            self.bytes_out += nbytes

    def snapshot(self) -> dict:
        """A copy of the counters, with the recent latencies of each method."""
        with self._lock:
            methods = {name: {'calls': m.calls, 'errors': m.errors, 'total_s': m.total_s,
                              'bytes_in': m.bytes_in, 'recent': list(m.recent)}
                       for name, m in self._methods.items()}
            return {'label': self.label, 'in_flight': self.in_flight,
                    'bytes_out': self.bytes_out, 'methods': methods}


_live: weakref.WeakSet[ServerStats] = weakref.WeakSet()
_live_lock = threading.Lock()


def register(stats: ServerStats) -> None:
    with _live_lock:
        _live.add(stats)


def unregister(stats: ServerStats) -> None:
    with _live_lock:
        _live.discard(stats)


def live_servers() -> list[ServerStats]:
    """The counters of every server started and not yet stopped in this process."""
    with _live_lock:
        return list(_live)


def frame_bytes(pickled, buffers) -> int:
    """Bytes of a request: its pickle plus its out-of-band buffers."""
    size = len(pickled)
    if buffers:
        size += sum(memoryview(b).nbytes for b in buffers)
    return size
