"""The courier server's counters: exact under concurrency, kept after their threads end."""

from __future__ import annotations

import concurrent.futures
import threading

from launchpad_py import courier
from launchpad_py.courier import stats


def test_concurrent_calls_are_all_counted():
    """8 threads × 2,000 calls each count 16,000 calls, none lost, none in flight."""
    counters = stats.ServerStats('t')
    start = threading.Barrier(8)

    def serve(_):
        start.wait(timeout=30)
        for _ in range(2000):
            shard = counters.begin()
            counters.end(shard, 'echo', 10, True)
            counters.sent(20)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(serve, range(8)))
    snapshot = counters.snapshot()
    assert snapshot['methods']['echo']['calls'] == 16000
    assert snapshot['methods']['echo']['bytes_in'] == 160000
    assert (snapshot['bytes_out'], snapshot['in_flight']) == (320000, 0)


def test_counts_of_ended_threads_are_kept():
    """A thread's counts stay after the thread ends, across several snapshots."""
    counters = stats.ServerStats('t')

    def serve():
        shard = counters.begin()
        counters.end(shard, 'ping', 1, False)

    for _ in range(3):
        thread = threading.Thread(target=serve)
        thread.start()
        thread.join()
        counters.snapshot()
    method = counters.snapshot()['methods']['ping']
    assert (method['calls'], method['errors'], len(method['recent'])) == (3, 3, 3)


def test_a_started_call_is_in_flight_until_it_ends():
    """begin() without end() reads as one call in flight."""
    counters = stats.ServerStats('t')
    shard = counters.begin()
    assert counters.snapshot()['in_flight'] == 1
    counters.end(shard, 'echo', 0, True)
    assert counters.snapshot()['in_flight'] == 0


def test_stopped_servers_leave_the_live_list():
    """live_servers() lists a server's counters from start to stop only."""
    server = courier.Server(object())
    assert server.stats not in stats.live_servers()
    server.start()
    assert server.stats in stats.live_servers()
    server.stop()
    assert server.stats not in stats.live_servers()
