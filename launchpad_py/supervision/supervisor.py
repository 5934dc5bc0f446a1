"""The supervisor: the one thread that changes a running program's state.

Workers and callers only post events (``worker.Events``); the supervisor
handles them one at a time, and waits for its alarms (restarts, removals'
grace) and the stop's grace period between them. It holds the controller's
parts and is the one place where they meet: ``Failures``
(``failure_handling.py``: stop the program, or restart the node), ``Stopping``
(``shutdown.py``: the grace period and the kills) and ``ElasticGroups``
(``elastic.py``: groups that grow and shrink). Each part is handed the list of
workers and what else it needs, and none calls another: what follows what (a
failure stops the program, a stop cancels waiting restarts) is written here.
``controller.ProgramController`` is the public handle around it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Callable

from launchpad_py.node_side import runtime
from launchpad_py.program import failure_policy
from launchpad_py.supervision.elastic import ElasticGroups, Groups
from launchpad_py.supervision.failure_handling import Failures, Then
from launchpad_py.supervision.shutdown import Stopping
from launchpad_py.supervision.worker import (ENDED as _ENDED, Events, Exited, FailureReport,
                                             GroupChange, LaunchAborted, NodeState, ProcessDied,
                                             Progress, Ready, StopRequested, Tick, Worker)

_log = logging.getLogger('launchpad_py.supervision.controller')
_STARTING = (NodeState.STARTING, NodeState.RESTARTING)


class _Prefix:
    """How far into the workers a condition was seen to hold, so asking "all?" after each
    of N events costs O(N) in all, not O(N) each (at 100,000 simulated nodes: a launch of
    hours, now seconds). ``forget()`` where a worker already passed may have changed back."""

    def __init__(self, workers: list[Worker], holds: Callable[[Worker], bool]):
        self._workers, self._holds, self._upto = workers, holds, 0

    def all(self) -> bool:
        workers = self._workers
        while self._upto < len(workers) and self._holds(workers[self._upto]):
            self._upto += 1
        return self._upto >= len(workers)

    def forget(self) -> None:
        self._upto = 0


class Supervisor:
    """The state of one running program and the loop that changes it (``run``).

    ``on_end`` runs on the supervisor thread once every node has ended, after the
    workers' cleanup and before ``ready`` and ``progress.done`` are set.
    """

    def __init__(self, name: str, launch_type: str, grace: float, scope: runtime.ProgramScope,
                 events: Events, policies: dict, groups: Groups | None,
                 on_end: Callable[[], None]):
        self.name = name
        self.events = events
        # One list, shared by the parts: restarts replace workers in it, growth appends.
        self.workers: list[Worker] = []
        #: Set once every node is ready, or the launch failed (then also once it ended).
        self.ready = threading.Event()
        self.progress = Progress()
        #: Why the launch failed without a node's failure (a fork server died), if it did.
        self.launch_failure: str | None = None
        #: Moments the supervisor waits for besides events: restarts, removals' grace.
        self._alarms = failure_policy.Alarms()
        self.stopping = Stopping(name, grace, scope, self.workers)
        self.failures = Failures(name, launch_type, policies, self.workers, self._alarms)
        self.elastic = ElasticGroups(name, launch_type, groups, self.workers, self._alarms,
                                     events, self.progress)
        self._on_end = on_end
        # An ended node stays ended (a restart replaces only a node not ended); a started one
        # may start again (a restart), so that scan starts over after any event but Ready.
        self._ended = _Prefix(self.workers, lambda w: w.state in _ENDED)
        self._started = _Prefix(self.workers, lambda w: w.state not in _STARTING)

    def run(self) -> None:
        """The supervisor thread: handles events until every node has ended."""
        try:
            while not self._ended.all():
                self._handle(self._next_event())
                self.progress.changed()
        except BaseException:  # A supervisor bug must not leave processes behind.
            _log.exception('supervisor of program %r failed; killing its nodes', self.name)
            for worker in self.workers:
                worker.kill()
        finally:
            for worker in self.workers:
                worker.cleanup()
            self._on_end()
            self.ready.set()
            self.progress.end()

    def _next_event(self):
        while True:
            timeout = self._alarms.wait_time()
            left = self.stopping.time_left()
            if left is not None:
                timeout = left if timeout is None else min(timeout, left)
            try:
                return self.events.queue.get(timeout=timeout)
            except queue.Empty:
                self._on_alarms()
                self.stopping.kill_if_due()
                if self._ended.all():
                    return Tick()

    def _on_alarms(self) -> None:
        for kind, worker in self._alarms.pop_due():
            if kind == 'restart':
                self._restart_now(worker)
            elif kind == 'remove' and worker.state not in _ENDED:
                worker.kill()  # Removed, and it ignored the stop for the grace period.

    def _handle(self, event) -> None:
        worker = getattr(event, 'worker', None)
        if worker is not None and worker.retired:
            return  # A node's earlier worker, replaced by its restart.
        if not isinstance(event, Ready):
            self._started.forget()
        if isinstance(event, Ready) and worker.state == NodeState.STARTING:
            worker.state = NodeState.RUNNING
            self.elastic.publish()
            if self._all_started():
                self.ready.set()
        elif isinstance(event, Exited):
            self._on_exit(worker, event.exit_code, event.failure)
        elif isinstance(event, StopRequested):
            self._begin_stop()
        elif isinstance(event, LaunchAborted):
            for unstarted in event.unstarted:
                unstarted.state = NodeState.STOPPED
            self._abort_launch()
        elif isinstance(event, ProcessDied):
            self._on_process_died(event.reason)
        elif isinstance(event, GroupChange):
            self.elastic.apply(event, self.stopping.begun, self.stopping.grace, self._start_worker)

    def _all_started(self) -> bool:
        """Whether no node is starting; True from then on once the launch is over."""
        return self.ready.is_set() or self._started.all()

    def _on_process_died(self, reason: str) -> None:
        if self.ready.is_set() or self.stopping.begun:
            _log.warning('program %r: %s; its running nodes go on', self.name, reason)
            return
        _log.error('program %r failed to start: %s', self.name, reason)
        self.launch_failure = reason
        self._abort_launch()
        self.ready.set()

    def _begin_stop(self) -> None:
        if self.stopping.begin():
            self.failures.cancel_restarts()
            self.stopping.ask_nodes()

    def _abort_launch(self) -> None:
        """Stops a launch that failed; nodes not yet ready have nothing to finish: killed now."""
        self._begin_stop()
        for worker in self.workers:
            if worker.state == NodeState.STARTING:
                worker.kill()

    def _on_exit(self, worker: Worker, exit_code: int | None, failure: FailureReport | None) -> None:
        if worker.state in _ENDED:
            return
        worker.exit_code, worker.ended_at = exit_code, time.time()
        self._alarms.cancel(('remove', worker))
        if worker.removing:  # Removed from its elastic group: it stopped, or a thread runs on.
            worker.state = NodeState.LEFT_RUNNING if worker.left_running else NodeState.STOPPED
        elif failure is not None:
            then = self.failures.on_failure(worker, failure, self.stopping.begun)
            if then is Then.ABORT_LAUNCH:
                self._abort_launch()
            elif then is Then.STOP:
                self._begin_stop()
        else:
            worker.state = NodeState.STOPPED if self.stopping.begun else NodeState.FINISHED
        self.elastic.publish()
        if self.failures.startup_failure is not None or self._all_started():
            self.ready.set()

    def _restart_now(self, worker: Worker) -> None:
        """The backoff is over: a new worker runs the node in ``worker``'s place."""
        if worker.state != NodeState.RESTARTING or self.stopping.begun:
            return
        try:
            fresh = self.failures.replace(worker)
        except Exception as exc:  # A failed restart: counted by replace.
            self._on_exit(worker, None, FailureReport.from_exception(exc))
            return
        self._start_worker(fresh)

    def _start_worker(self, worker: Worker) -> None:
        """Starts a worker after the launch (a restart or a new member); a failure to start
        counts as the node's failure."""
        worker.started_at = time.time()
        worker.send_members(self.elastic.members)
        try:
            worker.start()
        except Exception as exc:  # E.g. no process could be started: the node failed.
            self._on_exit(worker, None, FailureReport.from_exception(exc))
