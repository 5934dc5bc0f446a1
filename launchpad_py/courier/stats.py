"""Per-method counters of a courier server: what a status page shows about a node.

Every ``Server`` keeps a ``ServerStats``; ``live_servers()`` lists those of the
servers running in this process, so a node's runtime can report them without
knowing which servers its node made::

    server.stats.snapshot()   # {'methods': {'echo': {'calls': 3, ...}}, 'in_flight': 0, ...}

The hot path is one call per request and takes no lock: each serving thread
counts in a shard of its own, and readers add the shards up. A connection's
reader thread, which answers that connection's calls itself, holds
its shard and counts into it directly (no thread-local lookup, no second call
for the reply's bytes): at a tiny call's scale each Python call is about 1% of
the call, measured in instructions (``bench/observe_overhead.py --instructions``). Counts are exact;
latency is timed on a sample (each method's first ``TIME_FIRST`` calls in a
thread, then one in ``TIME_EVERY``), because at a tiny call's scale every
memory access shows: measured in place, the second clock read and its
bookkeeping cost more than all the counting. Timed calls go into a bounded ring
per method whose p99 is computed when someone asks. Calls in flight are read
off the server's permits, so starting a call costs nothing here.
"""

from __future__ import annotations

import collections
import threading
import time
import weakref
from typing import Callable

#: Recent latencies kept per method, for the p99 (a window, not the whole run).
RECENT_CALLS = 1024
#: Each method's calls in a serving thread are all timed up to this many ...
TIME_FIRST = 64
#: ... and then one in this many (a power of two).
TIME_EVERY = 8
_EVERY_MASK = TIME_EVERY - 1
_clock = time.perf_counter


class _Method:
    __slots__ = ('calls', 'errors', 'timed', 'total_s', 'bytes_in', 'recent')

    def __init__(self) -> None:
        self.calls = self.errors = self.timed = self.bytes_in = 0
        self.total_s = 0.0  # Of the timed calls.
        self.recent: collections.deque[float] = collections.deque(maxlen=RECENT_CALLS)

    def add(self, other: '_Method') -> None:
        self.calls += other.calls
        self.errors += other.errors
        self.timed += other.timed
        self.bytes_in += other.bytes_in
        self.total_s += other.total_s
        self.recent.extend(list(other.recent))


class Shard:
    """The counters one thread writes; nobody else writes them, so no lock is needed."""

    __slots__ = ('thread', 'bytes_out', 'methods')

    def __init__(self, thread: threading.Thread | None) -> None:
        self.thread = thread
        self.bytes_out = 0
        self.methods: dict[str, _Method] = {}

    def count(self, method: str, start: float, bytes_in: int, ok: bool) -> None:
        """Counts one finished call that began at ``start``; only this shard's thread calls it."""
        entry = self.methods.get(method)
        if entry is None:
            entry = self.methods[method] = _Method()
        calls = entry.calls = entry.calls + 1
        entry.bytes_in += bytes_in
        if not ok:
            entry.errors += 1
        if calls <= TIME_FIRST or not calls & _EVERY_MASK:
            elapsed = _clock() - start
            entry.timed += 1
            entry.total_s += elapsed
            entry.recent.append(elapsed)


class ServerStats:
    """Calls served, in flight, latency and bytes of one server.

    Each serving thread counts in a shard of its own (a lock per call would
    cost more than everything else here); readers add the shards up.
    ``in_flight`` tells how many calls run now (the server reads its permits).
    ``owner_thread`` is the thread that made the server: where several nodes
    share a process (``local_mt``), it tells whose server this is.

        start = time.perf_counter()
        ...                                   # run the call, in the same thread
        stats.record('echo', start, bytes_in=27, ok=True)
    """

    def __init__(self, label: str | None, in_flight: Callable[[], int] = lambda: 0) -> None:
        self.label = label
        self.owner_thread = threading.get_ident()
        self._in_flight = in_flight
        self._local = threading.local()
        self._shards: list[Shard] = []
        self._retired = Shard(None)  # What threads that have ended counted.
        self._lock = threading.Lock()  # Guards the list of shards, not the counts.

    def shard(self) -> Shard:
        """The calling thread's counters. A thread that serves many calls (a connection's
        reader) fetches its shard once and counts into it directly: that is the hot path."""
        try:
            return self._local.shard
        except AttributeError:
            shard = self._local.shard = Shard(threading.current_thread())
            with self._lock:
                # Threads come and go (a connection's reader hands over when a call blocks):
                # fold the ended ones in now, or a server nobody asks for statistics keeps
                # one shard per thread it ever had.
                self._retire_ended()
                self._shards.append(shard)
            return shard

    def _retire_ended(self) -> None:
        """Moves the counts of threads that have ended into ``_retired`` (hold ``_lock``)."""
        for shard in [s for s in self._shards if not s.thread.is_alive()]:
            self._shards.remove(shard)  # Its thread is gone: its counts are final.
            _merge(self._retired, shard)

    def record(self, method: str, start: float, bytes_in: int, ok: bool) -> None:
        """Counts one finished call that began at ``start`` (``time.perf_counter()``)."""
        self.shard().count(method, start, bytes_in, ok)

    def sent(self, nbytes: int) -> None:
        """Counts a reply's bytes (the transports count them as they send)."""
        self.shard().bytes_out += nbytes

    def snapshot(self) -> dict:
        """The counters added up, with the recent latencies of each method."""
        total = Shard(None)
        with self._lock:
            self._retire_ended()
            _merge(total, self._retired)
            for shard in self._shards:
                _merge(total, shard)
        methods = {name: {'calls': m.calls, 'errors': m.errors, 'timed': m.timed,
                          'total_s': m.total_s, 'bytes_in': m.bytes_in, 'recent': list(m.recent)}
                   for name, m in total.methods.items()}
        return {'label': self.label, 'in_flight': self._in_flight(),
                'bytes_out': total.bytes_out, 'methods': methods}


def _merge(into: Shard, shard: Shard) -> None:
    into.bytes_out += shard.bytes_out
    for name, entry in list(shard.methods.items()):
        into.methods.setdefault(name, _Method()).add(entry)


# Keyed by id, holding weak references (a server dropped unstopped leaves no counters alive).
# No lock: every local_mt node's server registers at its start and unregisters at its stop,
# and at 2,000 nodes stopping at once a shared lock here queued them past the grace period
# (bench/scale_2000_stop39.json). Assigning, popping and copying a dict's values are each
# atomic under the GIL.
_live: dict[int, weakref.ref] = {}


def register(stats: ServerStats) -> None:
    _live[id(stats)] = weakref.ref(stats)


def unregister(stats: ServerStats) -> None:
    _live.pop(id(stats), None)


def live_servers() -> list[ServerStats]:
    """The counters of every server started and not yet stopped in this process."""
    return [s for ref in list(_live.values()) if (s := ref()) is not None]


def buffer_bytes(buffers) -> int:
    """Bytes of a request's out-of-band buffers (its pickle is ``len(frame.pickled)``)."""
    return sum(memoryview(b).nbytes for b in buffers)
