"""The running program: start, supervise, stop, and report failures.

Every launcher returns a ``ProgramController``::

    with lp.launch(p, launch_type='local_mp') as program:
        program.wait(timeout=60)     # re-raises the first node failure

Supervision is one thread that owns all state changes; workers only post
events. The default failure policy stops the program on the first failure;
per-group policies may restart failed nodes instead (``failure_handling.py``), and
elastic groups grow and shrink while the program runs (``elastic.py``).
"""

from __future__ import annotations

import logging
import queue
import threading
import time

from launchpad_py import errors
from launchpad_py.node_side import runtime
from launchpad_py.program import failure_policy as failure_policy_module
from launchpad_py.supervision import interruptible, stuck_threads
from launchpad_py.supervision.elastic import ElasticGroups, Groups
from launchpad_py.supervision.observe import Observability
from launchpad_py.supervision.failure_handling import Failures
from launchpad_py.supervision.shutdown import Stopping
from launchpad_py.supervision.worker import (ENDED, Events, Exited, FailureReport, GroupChange,
                                             LaunchAborted, NodeState, NodeStatus, ProcessDied,
                                             Ready, StopRequested, Tick, Worker)

_log = logging.getLogger(__name__)
_ENDED = ENDED


class ProgramController(Observability, Stopping, Failures, ElasticGroups):
    """Handle on a launched program: ``wait``, ``stop``, ``statuses``, ``add_nodes``."""

    def __init__(self, name: str, launch_type: str, grace: float, keep_process_alive: bool,
                 on_finish=None, failure_policy: dict | None = None, groups: Groups | None = None):
        self.name = name
        self.launch_type = launch_type
        self.events = Events()
        #: This program's stop state in the launching process (lp.stop() here stops it).
        self.scope = runtime.ProgramScope(name, self.request_stop)
        self._workers: list[Worker] = []
        self._events = self.events
        self._scope = self.scope
        self._grace = grace
        self._on_finish = on_finish
        self._ready = threading.Event()
        self._done = threading.Event()
        self._stopping = False
        self._stop_deadline: float | None = None
        self._failed: Worker | None = None
        self._startup_failure: Worker | None = None
        self._launch_failure: str | None = None
        self._failure_seen = False
        self._killed: list[str] = []
        self._stuck: dict[str, str] = {}  # Name -> Python stack of what could not be killed.
        self._handlers: threading.Thread | None = None
        #: Moments the supervisor waits for besides events: restarts, removals' grace.
        self._deadlines = failure_policy_module.Alarms()
        #: Notified after every event the supervisor handled (add_nodes waits on it).
        self._changed = threading.Condition()
        self._init_observability()
        self._init_failures(failure_policy or {})
        self._init_elastic(groups)
        # A non-daemon supervisor keeps the launching script alive while the program
        # runs, as a script ending with lp.launch(p) expects.
        self._thread = threading.Thread(target=self._supervise, name=f'lp-supervisor-{name}',
                                        daemon=not keep_process_alive)

    # -- starting ----------------------------------------------------------------

    def start(self, workers: list[Worker], ready_timeout: float | None = None) -> 'ProgramController':
        """Starts ``workers``; returns once all report ready, else raises LaunchError."""
        self._workers = list(workers)
        problem = self._unsupported_restarts() or self._unsupported_growth()
        if problem:
            if self._on_finish:
                self._on_finish()
            raise errors.ProgramError(problem)
        self._publish_members()
        runtime.activate(self._scope)
        _running.add(self)
        # Before the supervisor, which closes it when the nodes end: with none (a dry run) at once.
        self._open_status_endpoint()
        self._thread.start()
        started = 0
        try:
            for worker in self._workers:
                worker.started_at = time.time()
                worker.start()
                started += 1
        except BaseException:
            self._events.queue.put(LaunchAborted(tuple(self._workers[started:])))
            interruptible.wait(self._done)
            raise
        if not interruptible.wait(self._ready, ready_timeout):
            pending = [w.name for w in self._workers if w.state == NodeState.STARTING]
            self.stop()
            raise errors.LaunchError(
                f'program {self.name!r}: nodes {pending} did not become ready within '
                f'{ready_timeout:.0f}s; their output:\n' + self._tails(pending))
        if self._launch_failure is not None:
            interruptible.wait(self._done)
            raise errors.LaunchError(f'program {self.name!r} failed to start: '
                                     f'{self._launch_failure}')
        if self._startup_failure is not None:
            interruptible.wait(self._done)
            self._failure_seen = True
            raise self._startup_error(self._startup_failure)
        return self

    def _startup_error(self, worker: Worker) -> errors.LaunchError:
        tail = worker.output_tail()
        details = (f'--- output tail of {worker.name} ---\n{tail}'
                   if worker.failure.traceback.strip() in tail else
                   f'{worker.failure.traceback}\n--- output tail of {worker.name} ---\n{tail}')
        return errors.LaunchError(
            f'node {worker.label!r} (index {worker.index}, {worker.description}) of program '
            f'{self.name!r} failed to start: {worker.failure.summary}\n{details}')

    # -- public API ---------------------------------------------------------------

    def wait(self, timeout: float | None = None) -> None:
        """Blocks until the program ends; re-raises the first node failure.

        Raises ``TimeoutError`` if the program is still running after ``timeout``.
        """
        if not interruptible.wait(self._done, timeout):
            raise TimeoutError(f'program {self.name!r} still running after {timeout}s')
        self._raise_failure()
        self._raise_stuck()

    @property
    def keeps_process_alive(self) -> bool:
        """Local launches keep the launching script alive until the program ends."""
        return not self._thread.daemon

    def wait_quietly(self) -> None:
        """Waits for the end without raising; failures are reported at exit."""
        interruptible.wait(self._done)

    @property
    def is_running(self) -> bool:
        return not self._done.is_set()

    def statuses(self) -> list[NodeStatus]:
        return [NodeStatus(w.label, w.index, w.state, w.pid, w.exit_code, restarts=w.restarts,
                           host=w.host) for w in list(self._workers)]

    def __enter__(self) -> 'ProgramController':
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.stop()
        self._close_dashboard()
        if exc_type is None:
            self._raise_failure()

    def __repr__(self) -> str:
        state = 'running' if self.is_running else 'ended'
        return f'<ProgramController {self.name!r} {self.launch_type} {state}>'

    # -- supervision --------------------------------------------------------------

    def _supervise(self) -> None:
        try:
            while not all(w.state in _ENDED for w in self._workers):
                self._handle(self._next_event())
                with self._changed:
                    self._changed.notify_all()
        except BaseException:  # A supervisor bug must not leave processes behind.
            _log.exception('supervisor of program %r failed; killing its nodes', self.name)
            for worker in self._workers:
                worker.kill()
        finally:
            for worker in self._workers:
                worker.cleanup()
            self._close_status_endpoint()
            self._scope.stop_event.set()
            runtime.deactivate(self._scope)
            _running.discard(self)
            if self._failed is not None and not self._thread.daemon:
                _failed.append(self)  # Reported at exit if nobody waits (local launches).
            if self._killed:
                _log.warning('program %r: killed %s after the %.0fs grace period',
                             self.name, ', '.join(self._killed), self._grace)
            if self._stuck and not self._thread.daemon:
                stuck_threads.end_process(stuck_threads.report(self.name, self._grace, self._stuck))
            elif self._stuck:
                _log.warning('%s', stuck_threads.report(self.name, self._grace, self._stuck))
            if self._on_finish:
                self._on_finish()
            self._ready.set()
            self._done.set()
            with self._changed:
                self._changed.notify_all()

    def _next_event(self):
        while True:
            timeout = self._deadlines.wait_time()
            if self._stop_deadline is not None:
                left = max(0.0, self._stop_deadline - time.monotonic())
                timeout = left if timeout is None else min(timeout, left)
            try:
                return self._events.queue.get(timeout=timeout)
            except queue.Empty:
                self._on_deadlines()
                if self._stop_deadline is not None and time.monotonic() >= self._stop_deadline:
                    self._kill_stragglers()
                if all(w.state in _ENDED for w in self._workers):
                    return Tick()

    def _on_deadlines(self) -> None:
        for kind, worker in self._deadlines.pop_due():
            if kind == 'restart':
                self._restart_now(worker)
            elif kind == 'remove' and worker.state not in _ENDED:
                worker.kill()  # Removed, and it ignored the stop for the grace period.

    def _handle(self, event) -> None:
        worker = getattr(event, 'worker', None)
        if worker is not None and worker.retired:
            return  # A node's earlier worker, replaced by its restart.
        if isinstance(event, Ready) and worker.state == NodeState.STARTING:
            worker.state = NodeState.RUNNING
            self._publish_members()
            if self._all_started():
                self._ready.set()
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
            self._change_group(event)

    def _all_started(self) -> bool:
        return all(w.state not in (NodeState.STARTING, NodeState.RESTARTING)
                   for w in self._workers)

    def _on_process_died(self, reason: str) -> None:
        if self._ready.is_set() or self._stopping:
            _log.warning('program %r: %s; its running nodes go on', self.name, reason)
            return
        _log.error('program %r failed to start: %s', self.name, reason)
        self._launch_failure = reason
        self._abort_launch()
        self._ready.set()

    def _abort_launch(self) -> None:
        """Stops a launch that failed; nodes not yet ready have nothing to finish: killed now."""
        self._begin_stop()
        for worker in self._workers:
            if worker.state == NodeState.STARTING:
                worker.kill()

    def _on_exit(self, worker: Worker, exit_code: int | None, failure: FailureReport | None) -> None:
        if worker.state in _ENDED:
            return
        worker.exit_code, worker.ended_at = exit_code, time.time()
        self._deadlines.cancel(('remove', worker))
        if worker.removing:  # Removed from its elastic group: however it ended, it stopped.
            worker.state = NodeState.STOPPED
        elif failure is not None:
            self._on_failure(worker, failure)
        else:
            worker.state = NodeState.STOPPED if self._stopping else NodeState.FINISHED
        self._publish_members()
        if self._startup_failure is not None or self._all_started():
            self._ready.set()

    def _tails(self, names: list[str]) -> str:
        return '\n'.join(f'--- {w.name} ---\n{w.output_tail()}'
                         for w in self._workers if w.name in names)



_running: set[ProgramController] = set()
_failed: list[ProgramController] = []


def running_programs() -> list[ProgramController]:
    return list(_running)


def failed_programs() -> list[ProgramController]:
    return list(_failed)


def stop_all_running() -> None:
    for controller in running_programs():
        controller.request_stop()
