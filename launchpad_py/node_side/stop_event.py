"""The program's stop event, safe to wait on from thousands of threads at once.

``threading.Event.wait`` sleeps on a private lock, but on waking it re-takes the
event's one shared lock before it returns. When 2,000 node threads of a ``local_mt``
program wake together at the stop, they queue on that lock; a thread that holds it
can lose the GIL to any busy thread, and the queue then drains by one thread per GIL
switch interval: with four busy threads, 2,000 waiters took 63 s to leave ``wait``
(tests/test_stop_event.py counts the queue; bench/stop_convoy.py times it).

``StopEvent`` keeps ``threading.Event``'s interface (it is one, for ``isinstance``
and type hints) but a woken waiter returns without touching any shared lock: each
waiter sleeps on a lock of its own, and the flag is read without a lock.

Nor does one thread wake them all. A ``set`` that released 2,000 waiters itself
lost the GIL to each thread it woke and so got an ever smaller share of it: the stop
handler was still in that loop past the grace period (2,000-node ``local_mt`` at high
load, stop 39). ``set`` wakes two; every waiter that returns wakes two more from the
same queue, so the wake-ups spread like a tree and the setter returns at once. Every
queued waiter's thread wakes two when it returns (one that timed out too), so the
queue always drains.
"""

from __future__ import annotations

import collections
import threading
import time

_allocate = threading.Lock


class StopEvent(threading.Event):
    """A ``threading.Event`` whose waiters leave ``wait`` without queuing on a shared lock."""

    def __init__(self):
        # threading.Event's own state is not used; its methods are all replaced here.
        self._flag = False
        self._guard = _allocate()
        self._waiters: list = []
        self._to_wake: collections.deque = collections.deque()  # Set, not yet released.

    def is_set(self) -> bool:
        return self._flag

    isSet = is_set  # Kept by threading.Event for old code.

    def set(self) -> None:
        with self._guard:
            self._flag = True
            self._to_wake.extend(self._waiters)
            self._waiters = []
        self._wake_two()

    def _wake_two(self) -> None:
        """Releases up to two waiters queued by ``set`` (deque.pop is atomic: no lock)."""
        pop = self._to_wake.pop
        for _ in range(2):
            try:
                pop().release()
            except IndexError:
                return

    def clear(self) -> None:
        with self._guard:
            self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        if self._flag:
            return True
        waiter = _allocate()
        waiter.acquire()
        with self._guard:
            if self._flag:
                return True
            self._waiters.append(waiter)
        if timeout is None:
            waiter.acquire()
            self._wake_two()
            return True
        woken = waiter.acquire(True, max(timeout, 0.0))
        if not woken:
            with self._guard:
                try:
                    self._waiters.remove(waiter)
                except ValueError:  # ``set`` queued it between the timeout and here:
                    woken = True    # its release may come to nobody, so wake two here.
        if woken:
            self._wake_two()
        return self._flag

    def waiting(self) -> int:
        """How many threads wait now (for tests and diagnostics)."""
        with self._guard:
            return len(self._waiters)

    def _at_fork_reinit(self):  # threading.Event's own, kept: fresh locks after a fork.
        self._guard = _allocate()
        self._waiters = []
        self._to_wake = collections.deque()
