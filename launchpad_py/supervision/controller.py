"""The running program: start, supervise, stop, and report failures.

Every launcher returns a ``ProgramController``::

    with lp.launch(p, launch_type='local_mp') as program:
        program.wait(timeout=60)     # re-raises the first node failure

The controller is the public handle; the state lives with its supervisor
(``supervisor.py``), one thread that owns every change while workers only
post events, and the parts it holds: failures and restarts
(``failure_handling.py``), the stop (``shutdown.py``), elastic groups
(``elastic.py``). Looking at the program (statistics, the status endpoint, the
dashboard) is ``observe.py``'s part, held here.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from launchpad_py import errors, process_limits
from launchpad_py.node_side import runtime
from launchpad_py.observability.dashboard import Dashboard
from launchpad_py.observability.statistics import NodeStatistics
from launchpad_py.supervision import interruptible
from launchpad_py.supervision.elastic import Groups
from launchpad_py.supervision.observe import Observability
from launchpad_py.supervision.supervisor import Supervisor
from launchpad_py.supervision.worker import (ENDED as _ENDED, Events, LaunchAborted, NodeState,
                                             NodeStatus, Worker)


class ProgramController:
    """Handle on a launched program: ``wait``, ``stop``, ``statuses``, ``add_nodes``."""

    def __init__(self, name: str, launch_type: str, grace: float, keep_process_alive: bool,
                 on_finish: Callable[[], None] | None = None, failure_policy: dict | None = None,
                 groups: Groups | None = None):
        self.name = name
        self.launch_type = launch_type
        self.events = Events()
        #: This program's stop state in the launching process (lp.stop() here stops it).
        self.scope = runtime.ProgramScope(name, self.request_stop)
        self._on_finish = on_finish
        self._supervisor = Supervisor(name, launch_type, grace, self.scope, self.events,
                                      failure_policy or {}, groups, on_end=self._ended)
        self._workers = self._supervisor.workers
        self._stopping = self._supervisor.stopping
        self._failures = self._supervisor.failures
        self._elastic = self._supervisor.elastic
        self._done = self._supervisor.progress.done
        self._observe = Observability(name, self._workers)
        # A non-daemon supervisor keeps the launching script alive while the program
        # runs, as a script ending with lp.launch(p) expects.
        self._thread = threading.Thread(target=self._supervisor.run,
                                        name=f'lp-supervisor-{name}',
                                        daemon=not keep_process_alive)

    # -- starting ----------------------------------------------------------------

    def start(self, workers: list[Worker], ready_timeout: float | None = None) -> 'ProgramController':
        """Starts ``workers``; returns once all report ready, else raises LaunchError."""
        self._workers[:] = workers
        problem = self._failures.unsupported() or self._elastic.unsupported()
        if problem:
            if self._on_finish:
                self._on_finish()
            raise errors.ProgramError(problem)
        self._elastic.publish()
        runtime.activate(self.scope)
        _running.add(self)
        # Before the supervisor, which closes it when the nodes end: with none (a dry run) at once.
        self._observe.open_status_endpoint(self)
        self._thread.start()
        started = 0
        try:
            for worker in self._workers:
                worker.started_at = time.time()
                worker.start()
                started += 1
        except BaseException:
            self.events.queue.put(LaunchAborted(tuple(self._workers[started:])))
            interruptible.wait(self._done)
            raise
        if not interruptible.wait(self._supervisor.ready, ready_timeout):
            pending = [w.name for w in self._workers if w.state == NodeState.STARTING]
            self.stop()
            raise errors.LaunchError(
                f'program {self.name!r}: nodes {pending} did not become ready within '
                f'{ready_timeout:.0f}s; their output:\n' + self._tails(pending))
        if self._supervisor.launch_failure is not None:
            interruptible.wait(self._done)
            raise errors.LaunchError(f'program {self.name!r} failed to start: '
                                     f'{self._supervisor.launch_failure}')
        if self._failures.startup_failure is not None:
            interruptible.wait(self._done)
            self._failures.seen = True
            raise self._startup_error(self._failures.startup_failure)
        return self

    def _startup_error(self, worker: Worker) -> errors.LaunchError:
        tail = worker.output_tail()
        details = (f'--- output tail of {worker.name} ---\n{tail}'
                   if worker.failure.traceback.strip() in tail else
                   f'{worker.failure.traceback}\n--- output tail of {worker.name} ---\n{tail}')
        limits = (process_limits.exhausted(f'{worker.name} could not start a thread or process')
                  + '\n' if process_limits.mentions_exhaustion(details) else '')
        return errors.LaunchError(
            f'node {worker.label!r} (index {worker.index}, {worker.description}) of program '
            f'{self.name!r} failed to start: {worker.failure.summary}\n{limits}{details}')

    def _tails(self, names: list[str]) -> str:
        return '\n'.join(f'--- {w.name} ---\n{w.output_tail()}'
                         for w in self._workers if w.name in names)

    def _ended(self) -> None:
        """On the supervisor thread, once every node has ended."""
        self._observe.close_status_endpoint()
        self.scope.stop_event.set()
        runtime.deactivate(self.scope)
        _running.discard(self)
        if self._failures.failed is not None and not self._thread.daemon:
            _failed.append(self)  # Reported at exit if nobody waits (local launches).
        self._stopping.report(own_process=not self._thread.daemon)
        if self._on_finish:
            self._on_finish()

    # -- public API ---------------------------------------------------------------

    def wait(self, timeout: float | None = None) -> None:
        """Blocks until the program ends; re-raises the first node failure.

        Raises ``TimeoutError`` if the program is still running after ``timeout``.
        """
        if not interruptible.wait(self._done, timeout):
            raise TimeoutError(f'program {self.name!r} still running after {timeout}s')
        self._failures.raise_failure()
        self._stopping.raise_stuck()

    def stop(self, grace: float | None = None, timeout: float | None = None) -> None:
        """Stops the program and waits until every node is gone."""
        self.request_stop(grace)
        if not interruptible.wait(self._done, timeout):
            raise TimeoutError(f'program {self.name!r} did not stop within {timeout}s')
        self._stopping.raise_stuck()

    def request_stop(self, grace: float | None = None) -> None:
        """Starts stopping the program; returns at once."""
        if grace is not None:
            self._stopping.grace = grace
        self.events.stop_requested()

    @property
    def killed_nodes(self) -> list[str]:
        """Nodes killed because they ignored the stop request for the grace period."""
        return list(self._stopping.killed)

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

    @property
    def is_stopping(self) -> bool:
        """True once the program began to stop (asked to, or after a node failed)."""
        return self._stopping.begun

    def statuses(self) -> list[NodeStatus]:
        return [NodeStatus(w.label, w.index, w.state, w.pid, w.exit_code, restarts=w.restarts,
                           host=w.host, restart_reasons=dict(w.restart_reasons))
                for w in list(self._workers)]

    def add_nodes(self, label: str, count: int = 1, timeout: float | None = None
                  ) -> list[NodeStatus]:
        """Adds ``count`` nodes to elastic group ``label``; returns once they are ready.

        Raises ``LaunchError`` if one fails to start, ``TimeoutError`` after ``timeout``.
        """
        new = self._elastic.change('grow', label, count, timeout,
                                   settled=lambda w: w.state != NodeState.STARTING)
        failed = [w for w in new if w.state in (NodeState.FAILED, NodeState.RESTARTING)]
        if failed:
            raise errors.LaunchError(f'node {failed[0].name} added to program {self.name!r} '
                                     f'failed to start: {failed[0].failure.summary}')
        return self._statuses_of(new)

    def remove_nodes(self, label: str, count: int = 1, grace: float | None = None,
                     timeout: float | None = None) -> list[NodeStatus]:
        """Stops the ``count`` newest live nodes of elastic group ``label``; returns once they
        are gone. One that ignores the stop is killed after ``grace`` seconds (default: the
        program's grace period)."""
        gone = self._elastic.change('shrink', label, (count, grace), timeout,
                                    settled=lambda w: w.state in _ENDED)
        return self._statuses_of(gone)

    def _statuses_of(self, workers: list[Worker]) -> list[NodeStatus]:
        names = {w.name for w in workers}
        return [s for s in self.statuses() if f'{s.label}/{s.index}' in names]

    # -- looking at it (observe.py) -------------------------------------------------

    def statistics(self, timeout: float = 2.0) -> list[NodeStatistics]:
        """Live per-node state and counters: calls, latency, bytes, RSS, CPU.

        Asks every running node at once; one that does not answer within
        ``timeout`` keeps the counters it last reported (so do ended nodes).
        """
        return self._observe.statistics(timeout)

    def history(self, node: str) -> list[dict]:
        """Recent samples of ``node`` ('label/index'): t, calls_per_s, cpu_percent, rss_bytes."""
        return self._observe.history(node)

    def output_tail(self, node: str) -> str:
        """The last lines ``node`` ('label/index') printed."""
        return self._observe.output_tail(node)

    @property
    def status_handle(self) -> str | None:
        """The handle file ``python -m launchpad_py.cli.status`` reads, while the program runs."""
        return self._observe.status_handle

    @property
    def dashboard(self) -> Dashboard | None:
        """The web dashboard, when launched with dashboard=True (see ``open_dashboard``)."""
        return self._observe.dashboard

    def open_dashboard(self, graph, port: int = 0) -> Dashboard:
        """Serves the web dashboard on loopback; prints its address and token.

        ``graph`` is ``launchpad_py.program.graph.structure(program)``. It stays up
        after the program ends, until ``dashboard.close()`` or leaving ``with``.
        """
        return self._observe.open_dashboard(self, graph, port)

    def __enter__(self) -> 'ProgramController':
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.stop()
        self._observe.close_dashboard()
        if exc_type is None:
            self._failures.raise_failure()

    def __repr__(self) -> str:
        state = 'running' if self.is_running else 'ended'
        return f'<ProgramController {self.name!r} {self.launch_type} {state}>'

    def _report_unseen_failure(self) -> None:
        """At interpreter exit (``launchers/launch.py``): see ``Failures.report_unseen``."""
        self._failures.report_unseen()


_running: set[ProgramController] = set()
_failed: list[ProgramController] = []


def running_programs() -> list[ProgramController]:
    return list(_running)


def failed_programs() -> list[ProgramController]:
    return list(_failed)


def stop_all_running() -> None:
    for controller in running_programs():
        controller.request_stop()
