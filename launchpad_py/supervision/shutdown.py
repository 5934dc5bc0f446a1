"""Stopping a program: the stop request, the grace period, and what cannot be stopped.

Mixed into ``ProgramController`` and run on its supervisor thread (but for
the public ``stop``/``request_stop``): stop handlers run on a thread of their
own, every node is asked to stop, and those still running when the grace
period ends are killed (threads cannot be: see ``stuck_threads``).
"""

from __future__ import annotations

import threading
import time

from launchpad_py.node_side import runtime
from launchpad_py.supervision import interruptible, stuck_threads
from launchpad_py.supervision.worker import ENDED as _ENDED, NodeState


class Stopping:
    """Mixed into ``ProgramController``."""

    def stop(self, grace: float | None = None, timeout: float | None = None) -> None:
        """Stops the program and waits until every node is gone."""
        self.request_stop(grace)
        if not interruptible.wait(self._done, timeout):
            raise TimeoutError(f'program {self.name!r} did not stop within {timeout}s')
        self._raise_stuck()

    def request_stop(self, grace: float | None = None) -> None:
        """Starts stopping the program; returns at once."""
        if grace is not None:
            self._grace = grace
        self._events.stop_requested()

    @property
    def killed_nodes(self) -> list[str]:
        """Nodes killed because they ignored the stop request for the grace period."""
        return list(self._killed)

    def _raise_stuck(self) -> None:
        """Only where the process was not ended for them (test_mt): see ``stuck_threads``."""
        if self._stuck:
            raise stuck_threads.error(self.name, self._grace, self._stuck)

    def _begin_stop(self) -> None:
        if self._stopping:  # A new request may shorten the grace (a second Ctrl-C: none).
            if self._stop_deadline is not None:
                self._stop_deadline = min(self._stop_deadline, time.monotonic() + self._grace)
            return
        self._stopping = True
        self._stop_deadline = time.monotonic() + self._grace
        # Stop handlers may block; the supervisor must stay free to enforce the deadline.
        self._handlers = threading.Thread(target=self._run_stop_handlers, daemon=True,
                                          name=f'lp-stop-handlers-{self.name}')
        self._handlers.start()
        self._cancel_restarts()
        for worker in self._workers:
            if worker.state not in _ENDED:
                worker.request_stop()

    def _run_stop_handlers(self) -> None:
        runtime.bind_thread(self._scope)
        self._scope.handle_stop()

    def _kill_stragglers(self) -> None:
        for worker in self._workers:
            if worker.state in _ENDED:
                continue
            worker.ended_at = time.time()
            if worker.kill():
                worker.state = NodeState.KILLED
                self._killed.append(worker.name)
            else:
                # A thread cannot be killed: see stuck_threads.py for what happens instead.
                worker.state = NodeState.KILLED
                self._killed.append(f'{worker.name} (thread left running)')
                stack = worker.stack()
                if stack:  # Only threads have one; a process that was never started has not.
                    self._stuck[worker.name] = stack
        if self._stuck and self._handlers is not None and self._handlers.is_alive():
            self._stuck['the stop handlers'] = stuck_threads.thread_stack(self._handlers)
        self._stop_deadline = None
