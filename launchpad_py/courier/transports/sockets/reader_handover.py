"""Futures' calls run on their connection's reader; a watchdog hands reading over when one blocks.

Handing each request of a futures connection to the thread pool costs a
thread wake-up per call, under one GIL (most of a pipelined call's cost). So
the reader runs the call itself, like a synchronous one. Calls on one
connection must still run concurrently (a call may wait for a later one, as
``batched_handler`` does), so a watchdog looks at every reader that runs a
call each ``TICK``: one running the same call at two ticks in a row (so for
one to two ticks) loses its connection's reading role to a new reader
thread, and finishes its call and ends. While such a call still runs, its
connection's later calls go to the thread pool (so a batch fills at once
instead of blocking one new reader after another); after it, they run on
the reader again. A reader only preempted by a busy machine costs one
hand-over and a short detour through the pool.

The watchdog thread ticks only while some reader runs a call, and sleeps
after ``QUIET_TICKS`` ticks without one.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

TICK = 0.001
QUIET_TICKS = 10


class Turn:
    """A connection's reading role: who holds it, and the call its reader runs now."""

    __slots__ = ('connection', 'peer', 'lock', 'reader', 'running', 'serial', 'detours')

    def __init__(self, connection, peer=None):
        self.connection, self.peer = connection, peer
        self.lock = threading.Lock()
        self.reader: object | None = None  # The token of the thread that reads now.
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

    def __init__(self, promote: Callable[[Turn, object], None], name: str):
        self._promote = promote
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
        seen: dict[Turn, int] = {}
        quiet = 0
        while self._sleep(quiet >= QUIET_TICKS):
            busy = False
            for turn in list(self._turns):
                if turn.running is None:
                    seen.pop(turn, None)
                    continue
                busy = True
                serial = turn.serial
                if seen.get(turn) == serial:  # The same call as a tick ago: stuck.
                    seen.pop(turn)
                    self._hand_over(turn, serial)
                else:
                    seen[turn] = serial
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

    def _hand_over(self, turn: Turn, serial: int) -> None:
        with turn.lock:
            if turn.running is None or turn.serial != serial:
                return  # It finished meanwhile.
            turn.reader = token = object()
            turn.running = None
            turn.detours += 1
        self._promote(turn, token)
