"""Stopping a program from inside it: ``lp.stop()`` and the ways to wait for it.

    def run(self):
        while not lp.wait_for_stop(timeout=0.1):
            self.step()

Every function works from any thread of any node, and from the launching
process while a program runs.
"""

from __future__ import annotations

import threading
from typing import Callable

from launchpad_py.node_side import runtime


def stop() -> None:
    """Stops the whole program this thread belongs to; returns without waiting."""
    runtime.current_scope().request_program_stop()


def wait_for_stop(timeout_secs: float | None = None, *, timeout: float | None = None) -> bool:
    """Blocks until the program is stopping; True if it is, False on timeout.

    ``timeout_secs`` is DeepMind Launchpad's name; ``timeout`` is accepted too.
    """
    if timeout_secs is not None and timeout is not None:
        raise TypeError('give wait_for_stop either timeout_secs or timeout, not both')
    return runtime.current_scope().stop_event.wait(timeout if timeout is not None else timeout_secs)


def stop_event() -> threading.Event:
    """The event set when the program stops (after the stop handlers ran)."""
    return runtime.current_scope().stop_event


def register_stop_handler(handler: Callable[[], None]) -> None:
    """Runs ``handler`` once when the program stops, in registration order."""
    runtime.current_scope().register_stop_handler(handler)


def unregister_stop_handler(handler: Callable[[], None]) -> None:
    runtime.current_scope().unregister_stop_handler(handler)


def make_program_stopper(launch_type=None) -> Callable[[], None]:
    """A callable that stops the program that is current where it is made.

    ``launch_type`` is accepted for compatibility; stopping does not depend on it.
    """
    scope = runtime.current_scope()
    return scope.request_program_stop
