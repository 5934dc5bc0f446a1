"""The launcher's side of one launch on Kubernetes: its objects, and a ``Starter`` per pod.

``Deployment`` creates the root Job (the lease) before any pod, keeps the
lease alive, watches the launch's pods through the API and deletes the root
when the program is over (the garbage collector deletes the rest).
``PodStarter`` is how ``launchers/remote/`` starts one node: a Secret with the node's
bootstrap, then its Pod; it follows the pod's log into the node's output,
says why a pod waits (Unschedulable, ImagePullBackOff, ...) and tells the
worker when the pod has ended, with its exit code.

Creates go through a bounded pool (``create_concurrency`` in flight), so a
launch of a thousand pods neither waits on a thousand round trips one after
the other nor floods the API server; so do the deletions of pods killed at
the end of a stop's grace period, which the stop asks for one node after
another; one watch of the launch's pods feeds every starter. A restart is a
new pod (``-r1``, ``-r2``...: same node label, new IP): it reports its new
address, which its clients look up in the launch's address book
(``supervision/launch_kit/address_book.py``). A pod the cluster ended (evicted, its node lost, preempted, deleted) is ``taken_away``, with a
``lost_by`` reason: under ``lp.Restart`` it comes back without counting
against ``max_restarts``.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time

from launchpad_py.node_side import node_process
from launchpad_py.launchers.kubernetes import manifests
from launchpad_py.launchers.kubernetes.api import Cluster
from launchpad_py.launchers.remote.worker import Starter

_log = logging.getLogger(__name__)


class Deployment:
    """The Kubernetes objects of one launch, and the threads that look after them."""

    def __init__(self, cluster: Cluster, names: manifests.Names, render, lease_seconds: int,
                 create_concurrency: int = 16):
        self.cluster, self.names = cluster, names
        #: ``render(label, index, owner, boot, incarnation) -> (secret, pod)`` of one node.
        self.render = render
        self.creates = concurrent.futures.ThreadPoolExecutor(
            create_concurrency, thread_name_prefix=f'lp-k8s-create-{names.program}')
        # Deletions have a pool of their own: finish() drops the creates still queued, but
        # runs the deletions (a stop's stragglers), which the root's cascade would otherwise
        # do one by one after the program.
        self._deletes = concurrent.futures.ThreadPoolExecutor(
            create_concurrency, thread_name_prefix=f'lp-k8s-delete-{names.program}')
        self.owner: dict | None = None
        self._lease_seconds = lease_seconds
        self._starters: dict[str, PodStarter] = {}
        self._finished = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def create_root(self, root: dict) -> None:
        """Creates the lease Job that owns everything else; starts the lease and the pod watch."""
        created_at = time.monotonic()
        self.owner = manifests.owner_reference(self.cluster.create(root))
        for target, name in ((self._keep_lease, 'lease'), (self._watch, 'watch')):
            thread = threading.Thread(target=target, args=(created_at,) if name == 'lease' else (),
                                      name=f'lp-k8s-{name}-{self.names.program}', daemon=True)
            thread.start()
            self._threads.append(thread)

    def starter(self, label: str, index: int, incarnation: int = 0) -> 'PodStarter':
        """The starter of node ``label/index``'s run ``incarnation``; it hears of its pod
        through the watch once it starts."""
        return PodStarter(self, label, index, incarnation)

    def follow(self, starter: 'PodStarter') -> None:
        self._starters[starter.pod_name] = starter

    @property
    def finished(self) -> bool:
        return self._finished.is_set()

    def delete_soon(self, pod: str) -> None:
        """Deletes ``pod`` on the pool, without waiting for the API server: a stop kills its
        stragglers one after another, and six deletions in a row took 2.3 s of one stop
        under load (``finish`` runs every one asked for before it deletes the root)."""
        try:
            self._deletes.submit(self.cluster.delete_pod, pod)
        except RuntimeError:  # finish() has begun: deleting the root Job takes the pod too.
            pass

    def _keep_lease(self, created_at: float) -> None:
        """Moves the root's deadline to ``lease_seconds`` from now, a few times per lease."""
        period = self._lease_seconds / 3
        while not self._finished.wait(period):
            elapsed = int(time.monotonic() - created_at) + 1
            try:
                self.cluster.extend_deadline(self.names.program, elapsed + self._lease_seconds)
            except Exception as exc:  # Retried next period; the lease covers a few misses.
                _log.warning('cannot extend the lease of %s: %s', self.names.program, exc)

    def _watch(self) -> None:
        selector = f'{manifests.PROGRAM_LABEL}={self.names.program}'
        self.cluster.watch_pods(selector, self._on_pod_event, self._finished)

    def _on_pod_event(self, kind: str, pod: dict) -> None:
        starter = self._starters.get(pod['metadata']['name'])
        if starter is not None:
            starter.observe(kind, pod)

    def finish(self) -> None:
        """Deletes the root (and with it every object of the launch); idempotent."""
        with self._lock:
            if self._finished.is_set():
                return
            self._finished.set()
        self.creates.shutdown(wait=True, cancel_futures=True)
        self._deletes.shutdown(wait=True)
        for starter in list(self._starters.values()):
            starter.close()
        if self.owner is not None:
            self.cluster.delete_job(self.names.program)
        self.cluster.close()
        for thread in self._threads:
            thread.join(10)


def waiting_reason(pod: dict) -> str | None:
    """Why a pod is not running yet: the scheduler's or the kubelet's reason and message."""
    status = pod.get('status') or {}
    for container in status.get('containerStatuses') or ():
        waiting = (container.get('state') or {}).get('waiting')
        if waiting and waiting.get('reason') not in (None, 'ContainerCreating'):
            return f"{waiting['reason']}: {waiting.get('message', '')}".rstrip(': ')
    for condition in status.get('conditions') or ():
        if condition.get('type') == 'PodScheduled' and condition.get('status') == 'False':
            return f"{condition.get('reason')}: {condition.get('message', '')}".rstrip(': ')
    return None


def _taken_reason(pod: dict) -> str | None:
    """Why the cluster ended a pod that had not ended by itself: evicted, its node lost,
    shut down, preempted (the pod's own ``reason``, or a ``DisruptionTarget`` condition)."""
    status = pod.get('status') or {}
    for condition in status.get('conditions') or ():
        if condition.get('type') == 'DisruptionTarget' and condition.get('status') == 'True':
            return f"{condition.get('reason')}: {condition.get('message', '')}".rstrip(': ')
    if status.get('phase') == 'Failed' and status.get('reason'):
        return f"{status['reason']}: {status.get('message', '')}".rstrip(': ')
    return None


def lost_reason(taken: str) -> str:
    """The short reason (``FailureReport.lost_by``) for the cluster's text of why it ended
    a pod: ``preempted``, ``node_lost`` (its node gone, tainted or shut down), else
    ``evicted``."""
    kind = taken.partition(':')[0]
    if 'Preempt' in kind:
        return 'preempted'
    if kind in ('NodeLost', 'DeletionByTaintManager', 'Shutdown', 'Terminated',
                'TerminationByKubelet', 'NodeShutdown'):
        return 'node_lost'
    return 'evicted'


def ended_by_cluster(kind: str, pod: dict, pod_name: str) -> tuple[str, str] | None:
    """Why the cluster, or someone through the API, ended a pod the program did not (its
    words), and the short ``lost_by`` reason; None while nothing says so. Single pods and
    packed pods judge their end by this one rule."""
    taken = _taken_reason(pod)
    if taken:
        return f'pod {pod_name} was ended by the cluster ({taken})', lost_reason(taken)
    if kind == 'DELETED' or pod['metadata'].get('deletionTimestamp'):
        return f'pod {pod_name} was deleted while the program ran', 'deleted'
    return None


def terminated_state(pod: dict) -> dict | None:
    """The first container's ``terminated`` state (exit code, reason), once one has ended."""
    for container in (pod.get('status') or {}).get('containerStatuses') or ():
        state = container.get('state') or {}
        if 'terminated' in state:
            return state['terminated']
    return None


class PodStarter(Starter):
    """One node as a Pod: created with its Secret, watched through the API, deleted to kill."""

    #: A restart is a new pod, with a new IP; so is a pod the cluster evicted or deleted.
    keeps_addresses = False

    def __init__(self, deployment: Deployment, label: str, index: int, incarnation: int = 0):
        self._deployment, self._label, self._index = deployment, label, index
        self.incarnation = incarnation
        self.pod_name = self.shown_as = deployment.names.pod(label, index, incarnation)
        self._sink = None
        self._created = False
        self._reason: str | None = None
        self._log = None
        self._log_lock = threading.Lock()
        self._code: int | None = None
        self._how: str | None = None
        self._taken: str | None = None
        self._lost_by: str | None = None  # The short reason of ``_taken``.
        self._terminating = False
        self._stopping = False  # The stop reached the node: a deletion now is part of it.
        self._deleting = False  # Its deletion was asked for (terminate runs twice at a stop).
        self._ended = threading.Event()

    def start(self, boot: dict, sink) -> None:
        """Queues the creation of the pod and its Secret (``create_concurrency`` at a time)."""
        self._sink = sink
        self._deployment.follow(self)
        try:
            self._deployment.creates.submit(self._create, boot)
        except RuntimeError:  # The program is over already: nothing to start.
            self._ended.set()

    def _create(self, boot: dict) -> None:
        deployment = self._deployment
        secret, pod = deployment.render(self._label, self._index, deployment.owner, boot,
                                        self.incarnation)
        try:
            deployment.cluster.create(secret)
            if self._terminating or deployment.finished:
                return
            deployment.cluster.create(pod)
            self._created = True
        except Exception as exc:  # Refused: the node fails, with the API server's reason.
            self._how = str(exc)
            self._sink.note(str(exc))
            self._ended.set()

    def again(self, host: str | None) -> 'PodStarter | None':
        """The node's next run: a new pod, wherever the scheduler puts it."""
        del host
        if self._deployment.finished:
            return None
        return self._deployment.starter(self._label, self._index, self.incarnation + 1)

    def observe(self, kind: str, pod: dict) -> None:
        """One watch event of our pod: report why it waits, follow its log, notice its end."""
        phase = (pod.get('status') or {}).get('phase', 'Pending')
        reason = waiting_reason(pod)
        if reason and reason != self._reason:
            self._reason = reason
            text = f'pod {self.pod_name} is {phase.lower()}: {reason}'
            _log.warning('%s', text)
            self._sink.note(text)
        terminated = terminated_state(pod)
        running = phase in ('Running', 'Succeeded', 'Failed') or terminated is not None
        if running:
            self._follow_log()
        if terminated is not None:
            self._code = terminated.get('exitCode')
            self._how = terminated.get('reason')
        elif phase == 'Failed' or kind == 'DELETED':  # Evicted, or deleted by someone.
            self._how = (pod.get('status') or {}).get('reason') or kind.lower()
        ours = self._terminating or self._stopping or self._deployment.finished
        if not ours and self._taken is None:
            verdict = ended_by_cluster(kind, pod, self.pod_name)
            if verdict is not None:
                self._taken, self._lost_by = verdict
        if phase in ('Succeeded', 'Failed') or kind == 'DELETED':
            self._ended.set()

    def _follow_log(self) -> None:
        with self._log_lock:
            if self._log is not None or self._deployment._finished.is_set():
                return
            try:
                self._log = self._deployment.cluster.follow_log(self.pod_name)
            except Exception as exc:  # Its container never started: no log to follow.
                _log.debug('no log of %s: %s', self.pod_name, exc)
                self._log = False
                return
            self._sink.follow(self._log)

    def wait(self) -> int | None:
        self._ended.wait()
        return self._code

    def describe_exit(self, code: int | None) -> str:
        if code is None:
            return f'pod {self.pod_name} ended without an exit code: {self._how or "unknown"}'
        how = node_process.describe_exit(code)
        return f'{how}, {self._how}' if self._how and self._how not in ('Error', 'Completed') else how

    def taken_away(self) -> str | None:
        return self._taken

    def lost_by(self) -> str | None:
        return self._lost_by

    def stop_requested(self) -> None:
        self._stopping = True

    def terminate(self) -> bool:
        self._terminating = True
        if self._created and not self._ended.is_set() and not self._deleting:
            self._deleting = True
            self._deployment.delete_soon(self.pod_name)
        return self._created

    def close(self) -> None:
        with self._log_lock:
            log, self._log = self._log, False
        if log:
            log.close()
        self._ended.set()  # Nothing more will be heard of it: the program is over.

    def release(self) -> None:
        """Deletes the pod and its Secret: a restart replaced it, or its node left its
        elastic group (at the program's end deleting the root Job deletes them all)."""
        deployment = self._deployment
        if self._created and not deployment.finished:
            self._terminating = True
            deployment.cluster.delete_pod(self.pod_name)
            deployment.cluster.delete_secret(deployment.names.secret(self._label, self._index,
                                                                     self.incarnation))
