"""Futures' calls run on their connection's reader; a watchdog hands reading over when one blocks.

Handing each request of a futures connection to the thread pool costs a
thread wake-up per call, under one GIL (most of a pipelined call's cost). So
the reader runs the call itself, like a synchronous one. Calls on one
connection must still run concurrently (a call may wait for a later one, as
``batched_handler`` does), so a watchdog looks at every reader that runs a
call each ``TICK``: one running the same call over two ticks or more loses its
connection's reading role to a new reader thread, and finishes its call and
ends. While such a call still runs, its connection's later calls go to the
thread pool (so a batch fills at once instead of blocking one new reader after
another); after it, they run on the reader again.

Which calls are stuck is told from the scheduler's counts for the reader's
thread (``/proc/self/task/<id>/schedstat``) between two ticks: a call that
slept (it waits for something) or ran for a while (a long computation) is
handed over; one whose thread mostly waited for a CPU, a busy machine having
preempted it, is left to finish. Each hand-over costs a new thread and a
detour through the pool: with 8 calls in flight beside two busy processes on
2 cores, judging by ticks alone handed over 15 readers a second, the counts
1.5 (``bench.preempted_readers``: 3% more calls/s, 3% less CPU per call).
Where the counts cannot be read, every call over two ticks is handed over.

The watchdog thread ticks only while some reader runs a call, and sleeps
after ``QUIET_TICKS`` ticks without one.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable

TICK = 0.001
QUIET_TICKS = 10


class Turn:
    """A connection's reading role: who holds it, and the call its reader runs now."""

    __slots__ = ('connection', 'peer', 'lock', 'reader', 'thread_id', 'running', 'serial',
                 'detours')

    def __init__(self, connection, peer=None):
        self.connection, self.peer = connection, peer
        self.lock = threading.Lock()
        self.reader: object | None = None  # The token of the thread that reads now.
        self.thread_id: int | None = None  # Its native id (None: not known).
        self.running = None  # The frame the reader runs inline, or None.
        self.serial = 0  # Counts inline calls, so a stuck one is told from a new one.
        self.detours = 0  # Calls still running on readers that lost the role.

    def finish(self, token: object) -> bool:
        """Ends the inline call; whether the caller (``token``) still holds the reading role."""
        with self.lock:
            if self.reader is token:
                self.running = None
                return True
            self.detours -= 1
            return False


class Watchdog:
    """Promotes a new reader for a connection whose reader is stuck in a call.

    ``promote(turn, token)`` must start a thread that reads for ``turn`` as ``token``.
    """

    def __init__(self, promote: Callable[[Turn, object], None], name: str,
                 scheduled: Callable[[int], tuple[int, int] | None] | None = None):
        self._promote = promote
        self._scheduled = scheduled or scheduled_ns
        self.name = name
        self._turns: set[Turn] = set()
        self._cond = threading.Condition()
        self._asleep = True
        self._stopped = False
        self._thread: threading.Thread | None = None

    def add(self, turn: Turn) -> None:
        self._turns.add(turn)

    def discard(self, turn: Turn) -> None:
        self._turns.discard(turn)

    def begin(self, turn: Turn, frame) -> None:
        """Called by a reader about to run ``frame`` inline."""
        turn.running = frame
        turn.serial += 1
        if self._asleep:  # Rare: the first inline call after a quiet spell.
            with self._cond:
                if self._stopped:
                    return
                self._asleep = False
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name=self.name,
                                                    daemon=True)
                    self._thread.start()
                self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            thread, self._thread = self._thread, None
            self._cond.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)

    def _run(self) -> None:
        seen: dict[Turn, list] = {}  # Turn -> [serial, its reader's counts, when read].
        quiet = 0
        while self._sleep(quiet >= QUIET_TICKS):
            busy = False
            for turn in list(self._turns):
                if turn.running is None:
                    seen.pop(turn, None)
                    continue
                busy = True
                serial = turn.serial
                last = seen.get(turn)
                if last is None or last[0] != serial:
                    seen[turn] = [serial, None, 0]
                elif not self._only_preempted(turn, last):  # The same call: stuck.
                    seen.pop(turn)
                    self._hand_over(turn, serial)
            quiet = 0 if busy else quiet + 1
            if quiet >= QUIET_TICKS:
                seen.clear()

    def _sleep(self, long: bool) -> bool:
        """Waits a tick, or until woken when ``long``; False once stopped.

        A tick is a plain ``time.sleep``: a condition's timed wait makes and
        drops a lock and a waiter entry in Python every millisecond; a stop
        waits for the tick to end instead.
        """
        if not long:
            time.sleep(TICK)
            return not self._stopped
        with self._cond:
            if not self._stopped:
                self._asleep = True  # Set before looking: a reader starting now wakes us.
                if not any(turn.running is not None for turn in list(self._turns)):
                    self._cond.wait()
                self._asleep = False
            return not self._stopped

    def _only_preempted(self, turn: Turn, last: list) -> bool:
        """Whether the reader of a call seen at the last tick too should get more time: its
        thread waited for a CPU for at least half the time since the counts were last read
        and ran for less than a quarter of it. The first reading only starts the count."""
        thread = turn.thread_id
        counts = None if thread is None else self._scheduled(thread)
        if counts is None:
            return False
        now = time.monotonic_ns()
        before, then = last[1], last[2]
        last[1], last[2] = counts, now
        if before is None:
            return True
        elapsed = now - then
        ran, queued = counts[0] - before[0], counts[1] - before[1]
        return ran * 4 < elapsed and queued * 2 >= elapsed

    def _hand_over(self, turn: Turn, serial: int) -> None:
        with turn.lock:
            if turn.running is None or turn.serial != serial:
                return  # It finished meanwhile.
            turn.reader = token = object()
            turn.running = None
            turn.detours += 1
        self._promote(turn, token)


def scheduled_ns(thread_id: int) -> tuple[int, int] | None:
    """(ns on a CPU, ns waiting for one) of thread ``thread_id`` of this process, as the
    scheduler counts them; None where they cannot be read."""
    try:
        fd = os.open(f'/proc/self/task/{thread_id}/schedstat', os.O_RDONLY)
        try:
            ran, queued = os.read(fd, 128).split()[:2]
        finally:
            os.close(fd)
        return int(ran), int(queued)
    except (OSError, ValueError):
        return None
