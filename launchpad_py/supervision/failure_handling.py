"""The part of supervision that decides what a failure does: stop the program, or restart.

The first failure of a node whose group stops the program (the default,
``lp.StopProgram``) is what ``wait()`` raises, unless it only followed from
a peer's failure (a call to it failed), in which case the failure that
caused it takes its place. A node of a ``Restart`` group that fails waits out its backoff as
``RESTARTING`` (out of its group's live members), then a fresh worker from
``worker.restarted()`` takes its place: same label, index and address (a new
one where the launcher cannot keep it: a pod), one more restart counted. A
failure the scheduler caused (``FailureReport.by_scheduler``) that the launcher
cannot undo (a Slurm job ended) stops the program. Clients of the node see calls in flight fail with
``CourierUnavailableError``; later calls wait for it and succeed once it is
back. Events of the replaced worker are ignored. A node that fails after
``max_restarts`` restarts stops the program, and its failure says so. A node
the platform lost through no fault of its own (``FailureReport.lost_by``, a
reason: ``evicted``, ``deleted``, ``preempted``, ``node_lost`` for a pod the
cluster ended, ``host_lost`` for an unreachable host, ``node_failure`` for a
failed Slurm node) is restarted without counting against
``max_restarts``; ``worker.restart_reasons`` keeps how many of each. Those
are bounded apart (``lp.Restart(max_uncounted=...)``): a node whose host never
returns stops the program in the end, its failure naming the reason and count.

This part decides and keeps the record; it starts and stops nothing. ``on_failure``
answers what the supervisor must do next (``Then``), and ``replace`` hands it the
worker to start when a backoff is over.
"""

from __future__ import annotations

import enum
import logging
import os
import random
import sys
import time

from launchpad_py import errors
from launchpad_py.program import failure_policy
from launchpad_py.supervision.worker import FailureReport, NodeState, Worker

_log = logging.getLogger('launchpad_py.supervision.controller')


class Then(enum.Enum):
    """What the supervisor does after a failure."""
    GO_ON = 'go on'  # A restart is scheduled, or the program stops already.
    STOP = 'stop the program'
    ABORT_LAUNCH = 'abort the launch'  # The node failed before it was ready.


class Failures:
    """The failures of one program and its restart policies; used on the supervisor thread.

    ``workers`` is the controller's list (a restart replaces its worker there);
    ``alarms`` holds each restart's moment, keyed ``('restart', worker)``.
    """

    def __init__(self, name: str, launch_type: str, policies: dict, workers: list[Worker],
                 alarms: failure_policy.Alarms):
        self._name = name
        self._launch_type = launch_type
        self._policies: dict[str, failure_policy.Policy] = dict(policies)
        self._workers = workers
        self._alarms = alarms
        self._rng = random.Random()
        #: The failure ``wait()`` raises: its worker, or None.
        self.failed: Worker | None = None
        #: The node that failed before the program was ready, if one did.
        self.startup_failure: Worker | None = None
        #: Whether a caller was given the failure (else it is reported at exit).
        self.seen = False

    def on_failure(self, worker: Worker, failure: FailureReport, stopping: bool) -> Then:
        """``worker`` ended with ``failure``: its group's policy decides what follows."""
        if not stopping and self._restart_later(worker, failure):
            return Then.GO_ON
        if not stopping:
            failure = self._with_policy_note(worker, failure)
            if worker.state == NodeState.STARTING:  # Failed before it was ready.
                self.startup_failure = worker
            worker.state, worker.failure = NodeState.FAILED, failure
            self.failed = worker
            _log.error('%s (program %r): %s', _who(worker, failure), self._name, failure.summary)
            return Then.ABORT_LAUNCH if self.startup_failure is worker else Then.STOP
        if self._is_the_cause(failure):
            # The first failure only lost a peer, or the program stopped because the scheduler
            # ended it: this failure is why, so it is what wait() raises.
            _log.error('%s (program %r): %s', _who(worker, failure), self._name, failure.summary)
            worker.state, worker.failure, self.failed = NodeState.FAILED, failure, worker
        else:
            worker.state = NodeState.STOPPED
            _log.debug('node %s raised while the program stopped: %s', worker.name, failure.summary)
        return Then.GO_ON

    def _is_the_cause(self, failure: FailureReport) -> bool:
        first = self.failed
        if failure.by_scheduler:  # Its stop requests (SIGTERM) come before the nodes end.
            return first is None or not first.failure.by_scheduler
        if first is None and failure.raised and not failure.follows_from_a_peer:
            # A node that raised while the program stopped still failed (a test's cleanup
            # may stop the program before its node got to raise); calls cut by the stop
            # end their node quietly (node_side.runtime.ended_by_stop), so are not seen here.
            return True
        return (first is not None and first.failure.follows_from_a_peer
                and not failure.follows_from_a_peer)

    def raise_failure(self) -> None:
        worker = self.failed
        if worker is None:
            return
        self.seen = True
        failure = worker.failure
        error = errors.NodeFailedError(worker.label, worker.index, failure.traceback,
                                       failure.summary, failure.raised_in)
        raise error from _without_traceback(failure.exception)

    def report_unseen(self) -> None:
        """At interpreter exit: a failure nobody waited for still fails the script."""
        if self.failed is not None and not self.seen:
            worker = self.failed
            sys.stderr.write(f'launchpad_py: node {worker.label!r} (index {worker.index}) of '
                             f'program {self._name!r} failed:\n{worker.failure.traceback}\n')
            sys.stderr.flush()
            sys.stdout.flush()
            os._exit(1)

    # -- restarts -------------------------------------------------------------------

    def _policy(self, worker: Worker) -> failure_policy.Policy:
        return self._policies.get(worker.label, failure_policy.DEFAULT)

    def unsupported(self) -> str | None:
        """Why this launch cannot honour its Restart policies, if it cannot.

        A backend that declares its capabilities was refused earlier, naming those that
        can (``launchers/registry.py``); this catches launchers registered as bare functions.
        """
        for label, policy in self._policies.items():
            stuck = [w for w in self._workers if w.label == label and not w.can_restart]
            if isinstance(policy, failure_policy.Restart) and stuck:
                return (f'failure_policy[{label!r}] is {policy!r}, but {self._launch_type} cannot '
                        f'restart node {stuck[0].name} ({type(stuck[0]).__name__}); use '
                        'lp.StopProgram() for this group or a launcher that restarts nodes')
        return None

    def _restart_later(self, worker: Worker, failure: FailureReport) -> bool:
        """Schedules the failed ``worker``'s restart if its policy allows; whether it did.

        What the platform lost (``lost_by``: evicted, host lost...) was not the node's
        fault: it comes back without counting against ``max_restarts``.
        """
        policy = self._policy(worker)
        if not isinstance(policy, failure_policy.Restart):
            return False
        if failure.by_scheduler and failure.lost_by is None:
            return False  # What the scheduler took away for good (a Slurm job) is not given back.
        counted = counted_restarts(worker)
        uncounted = worker.restarts - counted
        if failure.lost_by is None and not policy.allows(counted):
            return False
        if failure.lost_by is not None and not policy.allows_uncounted(uncounted):
            return False
        delay = policy.delay(counted, self._rng)
        worker.state, worker.failure = NodeState.RESTARTING, failure
        self._alarms.set(('restart', worker), time.monotonic() + delay)
        if failure.lost_by is None:
            _log.warning('node %s of program %r failed: %s; restart %d of %d in %.1fs',
                         worker.name, self._name, failure.summary, counted + 1,
                         policy.max_restarts, delay)
        else:
            _log.warning('node %s of program %r was lost (%s): %s; restart in %.1fs, not '
                         'counted against max_restarts (uncounted restart %d of %d)',
                         worker.name, self._name, failure.lost_by, failure.summary, delay,
                         uncounted + 1, policy.max_uncounted)
        return True

    def _with_policy_note(self, worker: Worker, failure: FailureReport) -> FailureReport:
        """``failure``, saying why it was not restarted when its group restarts nodes."""
        policy = self._policy(worker)
        if not isinstance(policy, failure_policy.Restart):
            return failure
        if failure.lost_by is None:
            note = policy.exhausted(counted_restarts(worker))
        else:
            note = f'lost by {failure.lost_by}; ' + policy.exhausted_uncounted(
                uncounted_restarts(worker))
        return FailureReport(f'{failure.summary} ({note})', f'{failure.traceback}\n({note})',
                             failure.exception, failure.by_scheduler, failure.raised,
                             failure.lost_by)

    def replace(self, worker: Worker) -> Worker:
        """The backoff is over: the worker that runs the node in ``worker``'s place, not yet
        started. If ``worker.restarted()`` raises, that counts as a failed restart (so
        restarts cannot loop forever) and the exception goes to the caller."""
        try:
            fresh = worker.restarted()
        except Exception:
            worker.restarts += 1
            raise
        fresh.restarts = worker.restarts + 1
        reason = worker.failure.lost_by if worker.failure is not None else None
        fresh.restart_reasons = dict(worker.restart_reasons)
        fresh.restart_reasons[reason or 'failed'] = fresh.restart_reasons.get(reason or 'failed',
                                                                              0) + 1
        worker.retired = True
        worker.cleanup()
        self._workers[self._workers.index(worker)] = fresh
        _log.warning('node %s of program %r: restart %d', fresh.name, self._name, fresh.restarts)
        return fresh

    def cancel_restarts(self) -> None:
        """The program stops: nodes waiting to restart end here."""
        for worker in self._workers:
            if worker.state == NodeState.RESTARTING:
                self._alarms.cancel(('restart', worker))
                worker.state, worker.ended_at = NodeState.STOPPED, time.time()


def counted_restarts(worker: Worker) -> int:
    """The restarts that count against ``max_restarts``: not those after a platform's loss."""
    return worker.restarts - sum(uncounted_restarts(worker).values())


def uncounted_restarts(worker: Worker) -> dict[str, int]:
    """The restarts after a platform's loss (bounded by ``max_uncounted``), by reason."""
    return {why: n for why, n in worker.restart_reasons.items() if why != 'failed'}


def _who(worker: Worker, failure: FailureReport) -> str:
    """The node that raised first, then its caller: what a failure's first line names."""
    if failure.raised_in:
        return f'{failure.raised_in} raised, called by node {worker.name!r}'
    return f'node {worker.name} failed'


def _without_traceback(exc: BaseException | None) -> BaseException | None:
    """``exc`` as the cause of a ``NodeFailedError``, whose message already holds its traceback.

    Printed whole, the chain would repeat that traceback.
    """
    if exc is not None:
        exc.__traceback__, exc.__cause__, exc.__suppress_context__ = None, None, True
    return exc
