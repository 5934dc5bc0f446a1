"""The part of supervision that stops a program: the grace period, what cannot be stopped.

Run on the supervisor thread (``begin``, ``kill_if_due``): stop handlers run on
a thread of their own, every node is asked to stop, and those still running
when the grace period ends are killed (threads cannot be: see ``stuck_threads``).
The supervisor decides when a stop begins and what else ends with it (restarts
that were waiting); this part only knows the workers and the program's stop scope.
"""

from __future__ import annotations

import logging
import sys
import threading
import time

from launchpad_py.node_side import runtime
from launchpad_py.supervision import stuck_threads
from launchpad_py.supervision.worker import ENDED as _ENDED, NodeState, Worker

_log = logging.getLogger('launchpad_py.supervision.controller')


class Stopping:
    """The stop of one program: requested or not, its deadline, the nodes it had to kill."""

    def __init__(self, name: str, grace: float, scope: runtime.ProgramScope,
                 workers: list[Worker]):
        self.name = name
        #: Seconds a node has to end after it was asked to; a stop request may change it.
        self.grace = grace
        #: Whether the stop has begun (requested, or after a failure); never unset.
        self.begun = False
        #: Nodes killed because they ignored the stop for the grace period.
        self.killed: list[str] = []
        self._scope = scope
        self._workers = workers  # The controller's list: nodes come and go in it.
        self._deadline: float | None = None
        self._stuck: dict[str, str] = {}  # Name -> Python stack of what could not be killed.
        self._handlers: threading.Thread | None = None

    def begin(self) -> bool:
        """Starts the grace period and the stop handlers; False if the stop had begun already
        (then only a shorter grace, e.g. a second Ctrl-C's none, takes effect)."""
        if self.begun:
            if self._deadline is not None:
                self._deadline = min(self._deadline, time.monotonic() + self.grace)
            return False
        self.begun = True
        self._deadline = time.monotonic() + self.grace
        # Stop handlers may block; the supervisor must stay free to enforce the deadline.
        self._handlers = threading.Thread(target=self._run_stop_handlers, daemon=True,
                                          name=f'lp-stop-handlers-{self.name}')
        self._handlers.start()
        return True

    def ask_nodes(self) -> None:
        for worker in self._workers:
            if worker.state not in _ENDED:
                worker.request_stop()

    def time_left(self) -> float | None:
        """Seconds until stragglers are killed; None while no grace period runs."""
        return None if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    def kill_if_due(self) -> None:
        if self._deadline is not None and time.monotonic() >= self._deadline:
            self._kill_stragglers()

    def raise_stuck(self) -> None:
        """Only where the process was not ended for them (test_mt): see ``stuck_threads``."""
        if self._stuck:
            raise stuck_threads.error(self.name, self.grace, self._stuck)

    def report(self, own_process: bool) -> None:
        """At the program's end: what was killed; threads left running end this process
        when it is the program's own (``own_process``), else only a warning."""
        if self.killed:
            _log.warning('program %r: killed %s after the %.0fs grace period',
                         self.name, ', '.join(self.killed), self.grace)
        if self._stuck and own_process:
            stuck_threads.end_process(stuck_threads.report(self.name, self.grace, self._stuck))
        elif self._stuck:
            _log.warning('%s', stuck_threads.report(self.name, self.grace, self._stuck))

    def _run_stop_handlers(self) -> None:
        runtime.bind_thread(self._scope)
        self._scope.handle_stop()

    def _kill_stragglers(self) -> None:
        frames = sys._current_frames()  # Once for all stuck threads, not once each.
        for worker in self._workers:
            if worker.state in _ENDED:
                continue
            worker.ended_at = time.time()
            if worker.kill():
                worker.state = NodeState.KILLED
                self.killed.append(worker.name)
            else:
                # A thread cannot be killed: see stuck_threads.py for what happens instead.
                worker.state = NodeState.KILLED
                self.killed.append(f'{worker.name} (thread left running)')
                stack = worker.stack(frames)
                if stack:  # Only threads have one; a process that was never started has not.
                    self._stuck[worker.name] = stack
        if self._stuck and self._handlers is not None and self._handlers.is_alive():
            self._stuck['the stop handlers'] = stuck_threads.thread_stack(self._handlers, frames)
        self._deadline = None
