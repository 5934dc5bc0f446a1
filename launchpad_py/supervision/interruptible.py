"""Waiting in the main thread without missing Ctrl-C.

CPython runs a signal handler in the main thread when that thread next runs
Python code. A thread blocked in a lock (``Event.wait``) is woken by a signal
only if the signal interrupts its wait; one that arrives just before the wait
begins, or that the kernel hands to another thread, leaves the main thread
asleep, and its handler waits with it, possibly forever. This was seen: a
second Ctrl-C sent right after the first one's handler returned was never
handled, and the launcher hung instead of killing its stuck program. So the
main thread waits in short slices, and each slice's end runs what is pending.
"""

from __future__ import annotations

import threading
import time

#: The longest a signal waits for its handler while the main thread waits.
SLICE_S = 0.1


def wait(event: threading.Event, timeout: float | None = None) -> bool:
    """``event.wait(timeout)``, in slices when called from the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return event.wait(timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = SLICE_S if deadline is None else min(SLICE_S, deadline - time.monotonic())
        if event.wait(max(0.0, left)):
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False
