"""The program's stop event: ``threading.Event``'s contract, and no lock convoy at ``set``.

A ``threading.Event`` waiter re-takes the event's one shared lock after it is woken;
with thousands of node threads waking at a stop and other threads holding the GIL,
that queue held 2,000 ``local_mt`` nodes past their grace period
(bench/stop_convoy.py). These tests count the shared-lock takes instead of timing them.
"""

import threading

import pytest

from launchpad_py.node_side import runtime
from launchpad_py.node_side.stop_event import StopEvent


class _CountingLock:
    """A lock that counts its acquisitions once ``counting`` is on."""

    def __init__(self):
        self._lock = threading.Lock()
        self.counting = False
        self.takes = 0

    def acquire(self, *args):
        got = self._lock.acquire(*args)
        if got and self.counting:
            self.takes += 1
        return got

    def release(self):
        self._lock.release()

    __enter__ = acquire

    def __exit__(self, *exc):
        self.release()

    def _is_owned(self):  # threading.Condition asks its lock this.
        if self._lock.acquire(False):
            self._lock.release()
            return False
        return True

    def _release_save(self):
        self.release()

    def _acquire_restore(self, _state):
        self.acquire()


def _shared_takes_after_set(event, shared_lock: _CountingLock, waiters: int) -> int:
    """How often ``waiters`` woken threads took ``shared_lock`` after ``event.set()``."""
    in_wait = threading.Barrier(waiters + 1)
    woken = []

    def wait():
        in_wait.wait()
        woken.append(event.wait())

    threads = [threading.Thread(target=wait) for _ in range(waiters)]
    for thread in threads:
        thread.start()
    in_wait.wait()
    while len(_waiting(event)) < waiters:  # Every thread is inside wait() now.
        threading.Event().wait(0.001)
    shared_lock.counting = True
    event.set()
    for thread in threads:
        thread.join()
    shared_lock.counting = False
    assert woken == [True] * waiters
    return shared_lock.takes - 1  # ``set`` itself takes it once.


def _waiting(event):
    if isinstance(event, StopEvent):
        return event._waiters
    return event._cond._waiters


def test_threading_event_waiters_queue_on_one_lock_at_set():
    """The control: what the program's stop event did before (each waiter re-takes the lock)."""
    event = threading.Event()
    lock = _CountingLock()
    event._cond = threading.Condition(lock)
    assert _shared_takes_after_set(event, lock, 50) >= 50


def test_stop_event_waiters_leave_without_the_shared_lock():
    event = StopEvent()
    lock = event._guard = _CountingLock()
    assert _shared_takes_after_set(event, lock, 50) == 0


def test_the_program_scope_stop_event_has_no_convoy():
    scope = runtime.ProgramScope('convoy')
    assert isinstance(scope.stop_event, StopEvent)  # A threading.Event: the convoy above.
    lock = scope.stop_event._guard = _CountingLock()
    assert _shared_takes_after_set(scope.stop_event, lock, 50) == 0
    scope.handle_stop()
    scope.end()
    assert scope.stop_event.is_set()


def test_stop_event_keeps_the_event_contract():
    event = StopEvent()
    assert isinstance(event, threading.Event)
    assert not event.is_set() and not event.isSet()
    assert event.wait(0) is False
    assert event.wait(-1) is False
    assert event.wait(0.001) is False
    assert event.waiting() == 0  # A timed-out waiter is forgotten.
    event.set()
    assert event.is_set()
    assert event.wait() is True and event.wait(0) is True
    event.clear()
    assert not event.is_set()
    assert event.wait(0) is False


def test_a_waiter_that_times_out_as_set_runs_still_returns_the_flag():
    event = StopEvent()
    results = []
    started = threading.Barrier(2)

    def wait():
        started.wait()
        results.append(event.wait(30))

    thread = threading.Thread(target=wait)
    thread.start()
    started.wait()
    while event.waiting() < 1:
        threading.Event().wait(0.001)
    event.set()
    thread.join()
    assert results == [True]
    assert event.waiting() == 0


@pytest.mark.parametrize('waiters', [1, 20])
def test_set_wakes_every_waiter_of_each_wait_kind(waiters):
    event = StopEvent()
    results = []

    def forever():
        results.append(event.wait())

    def timed():
        results.append(event.wait(60))

    threads = [threading.Thread(target=fn) for fn in (forever, timed) for _ in range(waiters)]
    for thread in threads:
        thread.start()
    while event.waiting() < 2 * waiters:
        threading.Event().wait(0.001)
    event.set()
    for thread in threads:
        thread.join()
    assert results == [True] * (2 * waiters)


class _ReleaseRecordingLock:
    """A lock that records which thread released it."""
    releasers: list = []

    def __init__(self):
        self._lock = threading.Lock()

    def acquire(self, *args):
        return self._lock.acquire(*args)

    def release(self):
        _ReleaseRecordingLock.releasers.append(threading.get_ident())
        self._lock.release()

    __enter__ = acquire

    def __exit__(self, *exc):
        self.release()


@pytest.mark.parametrize('kind', ['forever', 'timed'])
def test_set_wakes_two_and_the_woken_wake_the_rest(monkeypatch, kind):
    """The setter releasing every waiter itself was starved of the GIL by the threads it
    woke (2,000-node local_mt stop, stop 39): it wakes two, each woken waiter two more."""
    from launchpad_py.node_side import stop_event
    monkeypatch.setattr(stop_event, '_allocate', _ReleaseRecordingLock)
    event, waiters, results = stop_event.StopEvent(), 50, []

    def wait():
        results.append(event.wait() if kind == 'forever' else event.wait(60))

    threads = [threading.Thread(target=wait) for _ in range(waiters)]
    for thread in threads:
        thread.start()
    while event.waiting() < waiters:
        threading.Event().wait(0.001)
    _ReleaseRecordingLock.releasers = []
    event.set()
    by_setter = _ReleaseRecordingLock.releasers.count(threading.get_ident())
    for thread in threads:
        thread.join(30)
    assert results == [True] * waiters
    # The guard's release is the setter's one more; the waiters' locks, two at most.
    assert by_setter <= 3, by_setter
    assert len(event._to_wake) == 0
