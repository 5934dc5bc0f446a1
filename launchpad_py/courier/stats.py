"""Per-method counters of a courier server: what a status page shows about a node.

Every ``Server`` keeps a ``ServerStats``; ``live_servers()`` lists those of the
servers running in this process, so a node's runtime can report them without
knowing which servers its node made::

    server.stats.snapshot()   # {'methods': {'echo': {'calls': 3, ...}}, 'in_flight': 0, ...}

The hot path takes no lock: each serving thread counts in its own shard (a
clock read at start and end, a few increments, one append to a bounded ring of
recent latencies per method); readers add the shards up, and the p99 is
computed when someone asks, not per call.
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

    def add(self, other: '_Method') -> None:
        self.calls += other.calls
        self.errors += other.errors
        self.bytes_in += other.bytes_in
        self.total_s += other.total_s
        self.recent.extend(list(other.recent))


class _Shard:
    """The counters one thread writes; nobody else writes them, so no lock is needed."""

    __slots__ = ('thread', 'begun', 'finished', 'bytes_out', 'start', 'methods')

    def __init__(self, thread: threading.Thread | None) -> None:
        self.thread = thread
        self.begun = self.finished = self.bytes_out = 0
        self.start = 0.0
        self.methods: dict[str, _Method] = {}


class ServerStats:
    """Calls served, in flight, latency and bytes of one server.

    Each serving thread counts in a shard of its own (a lock per call would
    cost more than everything else here); readers add the shards up.
    ``owner_thread`` is the thread that made the server: where several nodes
    share a process (``local_mt``), it tells whose server this is.

        shard = stats.begin()
        ...                                   # run the call, in the same thread
        stats.end(shard, 'echo', bytes_in=27, ok=True)
    """

    def __init__(self, label: str | None) -> None:
        self.label = label
        self.owner_thread = threading.get_ident()
        self._local = threading.local()
        self._shards: list[_Shard] = []
        self._retired = _Shard(None)  # What threads that have ended counted.
        self._lock = threading.Lock()  # Guards the list of shards, not the counts.

    def _new_shard(self) -> _Shard:
        shard = self._local.shard = _Shard(threading.current_thread())
        with self._lock:
            self._shards.append(shard)
        return shard

    def begin(self) -> _Shard:
        """Counts a call as in flight in the calling thread's shard; pass it to ``end``."""
        try:
            shard = self._local.shard
        except AttributeError:
            shard = self._new_shard()
        shard.begun += 1
        shard.start = _clock()
        return shard

    def end(self, shard: _Shard, method: str, bytes_in: int, ok: bool) -> None:
        elapsed = _clock() - shard.start
        record = shard.methods.get(method)
        if record is None:
            record = shard.methods[method] = _Method()
        record.calls += 1
        record.total_s += elapsed
        record.bytes_in += bytes_in
        record.recent.append(elapsed)
        if not ok:
            record.errors += 1
        shard.finished += 1

    def sent(self, nbytes: int) -> None:
        """Counts a reply's bytes (the transports call this as they send it)."""
        try:
            self._local.shard.bytes_out += nbytes
        except AttributeError:
            self._new_shard().bytes_out += nbytes

    def snapshot(self) -> dict:
        """The counters added up, with the recent latencies of each method."""
        total = _Shard(None)
        with self._lock:
            for shard in [s for s in self._shards if not s.thread.is_alive()]:
                self._shards.remove(shard)  # Its thread is gone: its counts are final.
                _merge(self._retired, shard)
            _merge(total, self._retired)
            for shard in self._shards:
                _merge(total, shard)
        methods = {name: {'calls': m.calls, 'errors': m.errors, 'total_s': m.total_s,
                          'bytes_in': m.bytes_in, 'recent': list(m.recent)}
                   for name, m in total.methods.items()}
        return {'label': self.label, 'in_flight': total.begun - total.finished,
                'bytes_out': total.bytes_out, 'methods': methods}


def _merge(into: _Shard, shard: _Shard) -> None:
    # Read finished before begun: a call ending meanwhile can only raise in_flight by one.
    finished = shard.finished
    into.bytes_out += shard.bytes_out
    into.finished += finished
    into.begun += shard.begun
    for name, record in list(shard.methods.items()):
        into.methods.setdefault(name, _Method()).add(record)


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


def buffer_bytes(buffers) -> int:
    """Bytes of a request's out-of-band buffers (its pickle is ``len(frame.pickled)``)."""
    return sum(memoryview(b).nbytes for b in buffers)
