"""Lets the courier servers of one process stop a few at a time, as long as stops progress.

    with stop_gate.turn():
        ...                          # close listeners, join their threads

A stop is short (≈4 ms of closes and joins) but hands the GIL over many times: each join
waits for a reader or watchdog thread to run and end. 2,000 local_mt nodes stop their
servers at once, so thousands of threads wait for the GIL together, each of them woken
every switch interval to ask for it; the load average passed 1,000 and the launching
process outlived its 10 s grace (bench/scale_2000_stop40a.json). Queued here
instead, waiting threads sleep: 600 nodes stopped in 0.77-0.93 s four at a time, against
1.7-4.9 s all at once (the stops' own time summed to 2.7 s, against 690-1,910 s).

A stop may wait on purpose (a call still running user code, up to 2 s on the socket
paths; gRPC's grace): such stops must not hold the others back. A stop that finds no
turn free and sees no stop finish for ``PATIENCE`` seconds goes ahead without one.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

#: Stops at once: enough to keep both cores of a small machine busy between joins.
TURNS = 4
#: How long a waiting stop lets the turns go without any stop finishing.
PATIENCE = 1.0


class StopGate:
    """Hands out ``turns`` turns to stop, first come first served (see the module)."""

    def __init__(self, turns: int = TURNS, patience: float = PATIENCE):
        self._turns = threading.Semaphore(turns)
        self._patience = patience
        # Stops finished: only its changing matters, so an increment that two threads race
        # (and one of them loses) still shows progress.
        self._finished = 0

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        held = self._wait()
        try:
            yield
        finally:
            self._finished += 1
            if held:
                self._turns.release()

    def _wait(self) -> bool:
        seen = self._finished
        while not self._turns.acquire(timeout=self._patience):
            if self._finished == seen:
                return False  # The turns' holders wait on something else: go ahead.
            seen = self._finished
        return True


_gate = StopGate()


def turn() -> contextlib.AbstractContextManager[None]:
    """A turn to stop a server in this process (see the module)."""
    return _gate.turn()
