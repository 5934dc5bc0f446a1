"""Waiting on remote calls without outliving the program.

A call to a node that has already stopped waits for it to come back, so a
node that blocks on a plain call during shutdown is only ended by the kill
after the grace period. These helpers wait on futures and give up as soon as
the program stops:

    results = results_or_none([s.futures.apply_update(d) for s in servers], lp.stop_event())
    if results is None:
        return            # the program is stopping
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any

_POLL_S = 0.25
_STOP_NOTICE_S = 2.0  # How long a failed call waits to learn whether the program is stopping.


def results_or_none(futures: list[concurrent.futures.Future],
                    stop: threading.Event) -> list[Any] | None:
    """The futures' results in order, or None if ``stop`` is set first.

    A call that fails because the program is stopping also yields None (the
    callee may stop a moment before this node hears of it); any other failure
    is raised.
    """
    pending = set(futures)
    while pending:
        _, pending = concurrent.futures.wait(pending, timeout=_POLL_S)
        if stop.is_set():
            return None
    try:
        return [future.result() for future in futures]
    except Exception:
        if is_stopping(stop):
            return None
        raise


def is_stopping(stop: threading.Event) -> bool:
    """After a call failed: whether the program is stopping (waits a moment to hear of it)."""
    return stop.wait(_STOP_NOTICE_S)
