"""Futures on one connection: calls run on the server's reader, callers read their replies.

What must still hold with no thread hand-off on the hot path: calls on one
connection run concurrently, every way of observing a future completes it,
cancelled futures and timeouts leave the connection working, and replies
nobody looks at never stall the server.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time

import pytest

from launchpad_py import courier
from launchpad_py.courier.transports.sockets import reader_handover

TRANSPORTS = ['auto', 'tcp']


class Gate:
    """Methods that wait for each other, so they can only finish if they run concurrently."""

    def __init__(self, parties: int = 1):
        self.opened = threading.Event()
        self.barrier = threading.Barrier(parties, timeout=30)
        self.marked = threading.Event()

    def wait_open(self) -> bool:
        return self.opened.wait(timeout=30)

    def open(self) -> str:
        self.opened.set()
        return 'opened'

    def meet(self, index: int) -> int:
        self.barrier.wait()
        return index

    def blob(self) -> bytes:
        return bytes(64 * 1024)

    def mark(self) -> None:
        self.marked.set()

    def echo(self, value):
        return value


@pytest.fixture(params=TRANSPORTS)
def gate_client(request):
    """A Gate for 6 parties served in this process, and a client of it over one transport."""
    gate = Gate(parties=6)
    with courier.Server(gate, thread_pool_size=8) as server:
        yield gate, courier.Client(server.address, transport=request.param, timeout=60)


def test_a_blocked_call_does_not_hold_up_later_calls(gate_client):
    """A call waiting for a later call on the same connection is released by it."""
    gate, client = gate_client
    waiting = client.futures.wait_open()
    assert client.futures.open().result(timeout=30) == 'opened'
    assert waiting.result(timeout=30) is True


def test_calls_on_one_connection_run_concurrently(gate_client):
    """Six calls that each wait for all six finish: none waited for another to end."""
    _, client = gate_client
    futures = [client.futures.meet(i) for i in range(6)]
    assert [f.result(timeout=30) for f in futures] == list(range(6))


def test_the_watchdog_ends_with_the_server():
    """Readers that lost their role and the watchdog end when the server stops."""
    gate = Gate()
    server = courier.Server(gate, label='gated').start()
    client = courier.Client(server.address, timeout=60)
    waiting = client.futures.wait_open()
    assert client.futures.open().result(timeout=30) == 'opened'
    assert waiting.result(timeout=30) is True
    server.stop()
    left = [t for t in threading.enumerate() if t.name.startswith('courier-gated')]
    for thread in left:
        thread.join(timeout=15)
    assert not [t.name for t in left if t.is_alive()]


@pytest.mark.parametrize('transport', TRANSPORTS)
def test_callbacks_wait_and_as_completed_complete_futures(transport):
    """Futures nobody calls result() on complete: done-callbacks, wait(), as_completed()."""
    with courier.Server(Gate()) as server:
        client = courier.Client(server.address, transport=transport, timeout=60)
        called = threading.Event()
        client.futures.echo(1).add_done_callback(lambda future: called.set())
        assert called.wait(timeout=30)
        done, not_done = concurrent.futures.wait([client.futures.echo(i) for i in range(8)],
                                                 timeout=30)
        assert not not_done and sorted(f.result() for f in done) == list(range(8))
        completed = concurrent.futures.as_completed([client.futures.echo(i) for i in range(8)],
                                                    timeout=30)
        assert sorted(f.result() for f in completed) == list(range(8))


def test_polling_done_completes_a_future():
    """A caller that only polls done() sees the future finish."""
    from conftest import wait_for
    with courier.Server(Gate()) as server:
        future = courier.Client(server.address, timeout=60).futures.echo('polled')
        wait_for(future.done, what='the polled future')
        assert future.result(timeout=0) == 'polled'


@pytest.mark.parametrize('transport', TRANSPORTS)
def test_replies_nobody_looks_at_do_not_stall_the_server(transport):
    """8 MiB of replies never looked at are read anyway: the server goes on to the next call."""
    gate = Gate()
    with courier.Server(gate) as server:
        client = courier.Client(server.address, transport=transport, timeout=60)
        unobserved = [client.futures.blob() for _ in range(128)]
        client.futures.mark()
        assert gate.marked.wait(timeout=30)
        assert len(unobserved) == 128


@pytest.mark.parametrize('transport', TRANSPORTS)
def test_a_cancelled_future_leaves_the_connection_working(transport):
    """Cancelling a pending future: it reports cancelled, and its reply breaks nothing."""
    with courier.Server(Gate()) as server:
        client = courier.Client(server.address, transport=transport, timeout=60)
        waiting = client.futures.wait_open()
        assert waiting.cancel()
        assert client.futures.open().result(timeout=30) == 'opened'
        assert client.futures.echo('after').result(timeout=30) == 'after'
        with pytest.raises(concurrent.futures.CancelledError):
            waiting.result(timeout=30)


@pytest.mark.parametrize('transport', TRANSPORTS)
def test_result_timeout_while_reading(transport):
    """result(timeout) returns in time while the caller reads, and the call completes later."""
    with courier.Server(Gate()) as server:
        client = courier.Client(server.address, transport=transport, timeout=60)
        waiting = client.futures.wait_open()
        with pytest.raises(concurrent.futures.TimeoutError):
            waiting.result(timeout=0.2)
        client.open()
        assert waiting.result(timeout=30) is True


def test_waiting_threads_take_turns_reading():
    """Threads waiting on their own futures of one connection each get their own answer."""
    with courier.Server(Gate()) as server:
        client = courier.Client(server.address, timeout=60)
        start = threading.Barrier(8, timeout=30)

        def issue(index):
            start.wait()
            futures = [client.futures.echo((index, i)) for i in range(50)]
            return [f.result(timeout=30) for f in reversed(futures)]

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(issue, range(8)))
    assert answers == [[(index, i) for i in reversed(range(50))] for index in range(8)]


def test_a_stuck_reader_is_handed_over_within_ticks():
    """The watchdog promotes a new reader for a call running over two ticks (unit level)."""
    promoted = []
    done = threading.Event()

    def promote(turn, token):
        promoted.append((turn, token))
        done.set()

    watchdog = reader_handover.Watchdog(promote, 'courier-test-watchdog')
    turn = reader_handover.Turn(connection=None)
    turn.reader = first = object()
    watchdog.add(turn)
    try:
        watchdog.begin(turn, frame=object())
        assert done.wait(timeout=30)
        assert promoted == [(turn, turn.reader)] and turn.reader is not first
        assert turn.detours == 1 and turn.running is None
        assert not turn.finish(first)  # The old reader learns it lost the role...
        assert turn.detours == 0  # ... and its detour is over.
    finally:
        watchdog.stop()


def test_a_reader_only_preempted_keeps_its_call_and_one_stuck_loses_it():
    """A reader whose thread only waits for a CPU (the scheduler's counts: queued, not
    running) is not replaced however many ticks its call takes; once it sleeps in its call
    instead, or runs on in it, it is (unit level, the counts made up)."""
    promoted = threading.Event()
    state = {'now': 'queued'}

    def scheduled(thread_id):
        now = time.monotonic_ns()
        return {'queued': (0, now), 'asleep': (0, 0), 'running': (now, 0)}[state['now']]

    for stuck in ('asleep', 'running'):
        promoted.clear()
        state['now'] = 'queued'
        watchdog = reader_handover.Watchdog(lambda turn, token: promoted.set(),
                                            'courier-test-watchdog', scheduled)
        turn = reader_handover.Turn(connection=None)
        turn.reader, turn.thread_id = object(), threading.get_native_id()
        watchdog.add(turn)
        try:
            watchdog.begin(turn, frame=object())
            # Fifty ticks and more: a reader judged by ticks alone is replaced after two.
            assert not promoted.wait(timeout=50 * reader_handover.TICK)
            state['now'] = stuck
            assert promoted.wait(timeout=30)
        finally:
            watchdog.stop()


def test_the_scheduler_counts_of_a_thread_are_read():
    """``scheduled_ns`` reads a live thread's counts, which grow as it runs; an unknown
    thread has none."""
    first = reader_handover.scheduled_ns(threading.get_native_id())
    started = time.process_time()
    while time.process_time() - started < 0.02:  # Run for 20 ms of CPU.
        pass
    later = reader_handover.scheduled_ns(threading.get_native_id())
    assert first is not None and later[0] - first[0] >= 10_000_000
    assert reader_handover.scheduled_ns(2 ** 31 - 1) is None


def _thread_cpu_s(native_id: int) -> float:
    """CPU seconds thread ``native_id`` of this process ran, from the scheduler's exact count."""
    with open(f'/proc/self/task/{native_id}/schedstat') as schedstat:
        return int(schedstat.read().split()[0]) / 1e9


def _pipeline(client, calls: int, depth: int, observe=None) -> list:
    """``calls`` futures kept ``depth`` in flight, oldest first; ``observe`` sees each one."""
    pending, results = [], []
    for index in range(calls):
        future = client.futures.echo(index)
        if observe is not None:
            observe(future)
        pending.append(future)
        if len(pending) >= depth:
            results.append(pending.pop(0).result(timeout=60))
    return results + [future.result(timeout=60) for future in pending]


def test_a_client_following_moves_leaves_its_futures_to_their_callers():
    """A client that follows moved servers (made from a handle) notes failed calls without
    observing its futures, so their replies are read by the callers waiting in result().

    It used to add a done-callback to every future: each became "observed", and the
    connection's background thread read the replies instead, one hand-off per call."""
    with courier.Server(Gate()) as server:
        client = courier.Client(server.address, relocate=lambda address: address)
        observed = []
        results = _pipeline(client, 300, 8, lambda future: observed.append(
            bool(future._mux._watched)))
    assert results == list(range(300))
    assert not any(observed)


def test_the_background_reader_does_not_spin_against_a_waiting_caller():
    """Observed futures (a done-callback each) that their caller also waits for: the
    background thread leaves the reading to the waiting caller instead of taking the role
    back at once, over and over, while that caller waits for the GIL to take it.

    Before, the background thread ran about seven times the waiting caller's CPU."""
    with courier.Server(Gate()) as server:
        client = courier.Client(server.address)
        client.futures.echo(0).result(timeout=60)
        background = client.futures.echo(0)._mux._thread.native_id
        me = threading.get_native_id()
        spent = _thread_cpu_s(background), _thread_cpu_s(me)
        results = _pipeline(client, 4000, 8, lambda future: future.add_done_callback(
            lambda _: None))
        background_s, caller_s = (_thread_cpu_s(t) - s for t, s in zip((background, me), spent))
    assert results == list(range(4000))
    assert background_s < caller_s, (background_s, caller_s)
