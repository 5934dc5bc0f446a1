"""The program's stop event, safe to wait on from thousands of threads at once.

``threading.Event.wait`` sleeps on a private lock, but on waking it re-takes the
event's one shared lock before it returns. When 2,000 node threads of a ``local_mt``
program wake together at the stop, they queue on that lock; a thread that holds it
can lose the GIL to any busy thread, and the queue then drains by one thread per GIL
switch interval: with four busy threads, 2,000 waiters took 63 s to leave ``wait``
(tests/test_stop_event.py counts the queue; bench/stop_convoy.py times it).

``StopEvent`` keeps ``threading.Event``'s interface (it is one, for ``isinstance``
and type hints) but a woken waiter returns without touching any shared lock: ``set``
hands every waiter its own released lock, and the flag is read without a lock.
"""

from __future__ import annotations

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

    def is_set(self) -> bool:
        return self._flag

    isSet = is_set  # Kept by threading.Event for old code.

    def set(self) -> None:
        with self._guard:
            self._flag = True
            waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.release()

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
            return True
        woken = waiter.acquire(True, max(timeout, 0.0))
        if not woken:
            with self._guard:
                try:
                    self._waiters.remove(waiter)
                except ValueError:  # ``set`` took it between the timeout and here.
                    pass
        return self._flag

    def waiting(self) -> int:
        """How many threads wait now (for tests and diagnostics)."""
        with self._guard:
            return len(self._waiters)

    def _at_fork_reinit(self):  # threading.Event's own, kept: fresh locks after a fork.
        self._guard = _allocate()
        self._waiters = []
