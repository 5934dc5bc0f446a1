"""The courier server's counters: exact under concurrency, kept after their threads end."""

from __future__ import annotations

import concurrent.futures
import gc
import threading
import time
import weakref

from launchpad_py import courier
from launchpad_py.courier import stats


def test_concurrent_calls_are_all_counted():
    """8 threads × 2,000 calls each count 16,000 calls, none lost, none in flight."""
    counters = stats.ServerStats('t')
    start = threading.Barrier(8)

    def serve(_):
        start.wait(timeout=30)
        for _ in range(2000):
            counters.record('echo', time.perf_counter(), 10, True)
            counters.sent(20)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(serve, range(8)))
    snapshot = counters.snapshot()
    assert snapshot['methods']['echo']['calls'] == 16000
    assert snapshot['methods']['echo']['bytes_in'] == 160000
    assert snapshot['bytes_out'] == 320000


def test_counts_of_ended_threads_are_kept():
    """A thread's counts stay after the thread ends, across several snapshots."""
    counters = stats.ServerStats('t')

    def serve():
        counters.record('ping', time.perf_counter(), 1, False)

    for _ in range(3):
        thread = threading.Thread(target=serve)
        thread.start()
        thread.join()
        counters.snapshot()
    method = counters.snapshot()['methods']['ping']
    assert (method['calls'], method['errors'], len(method['recent'])) == (3, 3, 3)


def test_threads_that_ended_are_let_go_without_a_snapshot():
    """Readers come and go (one hands reading on when a call blocks) and nobody may ever ask
    for statistics: each new thread folds the ended ones' counts in, so the server holds no
    shard, and no Thread object, per thread it ever had (10-minute soak grew 44 MB before)."""
    counters = stats.ServerStats('t')
    ended = []

    def serve():
        counters.record('ping', time.perf_counter(), 1, True)

    for _ in range(200):
        thread = threading.Thread(target=serve)
        thread.start()
        thread.join(timeout=30)
        ended.append(weakref.ref(thread))
        del thread
    gc.collect()
    assert sum(ref() is not None for ref in ended) <= 1  # Only the last one may still be held.
    assert counters.snapshot()['methods']['ping']['calls'] == 200


def test_latency_is_timed_on_a_sample_and_calls_all_counted():
    """1,000 calls in one thread: all counted; the first TIME_FIRST, then one in TIME_EVERY, timed."""
    counters = stats.ServerStats('t')
    for _ in range(1000):
        counters.record('echo', time.perf_counter(), 1, True)
    method = counters.snapshot()['methods']['echo']
    sampled = stats.TIME_FIRST + (1000 - stats.TIME_FIRST) // stats.TIME_EVERY
    assert (method['calls'], method['timed'], len(method['recent'])) == (1000, sampled, sampled)
    assert method['total_s'] == sum(method['recent'])


def test_calls_in_flight_are_the_permits_in_use():
    """Three calls blocked in a server's methods read as three in flight, then none."""
    gate, arrived = threading.Event(), threading.Semaphore(0)

    class Blocking:
        def hold(self):
            arrived.release()
            gate.wait(30)

    with courier.Server(Blocking()) as server:
        client = courier.Client(server.address)
        futures = [client.futures.hold() for _ in range(3)]
        assert all(arrived.acquire(timeout=30) for _ in range(3))
        assert server.stats.snapshot()['in_flight'] == 3
        gate.set()
        for future in futures:
            future.result(timeout=30)
        assert server.stats.snapshot()['in_flight'] == 0


def test_stopped_servers_leave_the_live_list():
    """live_servers() lists a server's counters from start to stop only."""
    server = courier.Server(object())
    assert server.stats not in stats.live_servers()
    server.start()
    assert server.stats in stats.live_servers()
    server.stop()
    assert server.stats not in stats.live_servers()


def test_registering_and_unregistering_take_no_lock_another_thread_holds(monkeypatch):
    """Every server registers its counters at start and unregisters them at stop; at 2,000
    local_mt nodes stopping at once the one module lock they took queued the node threads
    past the grace period (bench/scale_2000_stop39.json). With a lock of that name held
    by this thread throughout, both must finish, and the list must be right."""
    from launchpad_py.courier import stats as stats_module
    held = threading.Lock()
    held.acquire()
    monkeypatch.setattr(stats_module, '_live_lock', held, raising=False)
    mine = [stats_module.ServerStats('convoy-%d' % i) for i in range(3)]
    done = threading.Event()

    def churn():
        for one in mine:
            stats_module.register(one)
        stats_module.unregister(mine[0])
        done.set()

    threading.Thread(target=churn, daemon=True).start()
    try:
        assert done.wait(10), 'register/unregister waited for a module lock'
    finally:
        held.release()
    live = stats_module.live_servers()
    assert mine[1] in live and mine[2] in live and mine[0] not in live
    for one in mine[1:]:
        stats_module.unregister(one)
    assert not any(one in stats_module.live_servers() for one in mine)
