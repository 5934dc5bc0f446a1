"""Node classes for the observability tests, importable from node processes."""

from __future__ import annotations

import threading
import time


class Counted:
    """A courier object whose traffic the tests count."""

    def __init__(self):
        self._gate = threading.Event()
        self._held = threading.Semaphore(0)

    def echo(self, value):
        return value

    def fail(self, message):
        raise KeyError(message)

    def slow(self, seconds):
        time.sleep(seconds)  # The work being measured, not synchronization.
        return seconds

    def hold(self):
        """Blocks until ``release``; while it blocks the call is in flight."""
        self._held.release()
        self._gate.wait(30)

    def held(self, count, timeout):
        """Returns once ``count`` calls of ``hold`` have arrived."""
        return all(self._held.acquire(timeout=timeout) for _ in range(count))

    def release(self):
        self._gate.set()


class Bomb:
    """Its run() raises once ``arm`` is called: a node failing on demand.

    Call ``arm`` through ``futures``: the node may die before its reply leaves.
    """

    def __init__(self):
        self._armed = False
        self._wake = threading.Event()

    def arm(self):
        self._armed = True
        self._wake.set()

    def run(self):
        import launchpad_py as lp
        # A stop wakes it too: ignoring it would hold every stop for the whole grace period.
        lp.register_stop_handler(self._wake.set)
        self._wake.wait(60)
        if self._armed:
            raise RuntimeError('the bomb went off as the test asked')


def call_forever(server):
    """A client node: calls ``server.echo`` until the program stops."""
    import launchpad_py as lp
    stop = lp.stop_event()
    while not stop.is_set():
        try:
            server.echo(1)
        except Exception:
            return
