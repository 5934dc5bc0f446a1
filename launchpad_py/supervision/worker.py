"""What the supervisor needs from a running node, whatever runs it.

A ``Worker`` runs one executable (as a thread, a process, later a remote
process) and reports to its supervisor through ``Events``.
"""

from __future__ import annotations

import abc
import concurrent.futures
import dataclasses
import queue
import threading
import traceback
from typing import TYPE_CHECKING, Callable

from launchpad_py.node_side import node_process
from launchpad_py.courier.errors import CourierCancelledError, CourierUnavailableError
from launchpad_py.errors import PeerFailedError
from launchpad_py.node_state import ENDED, NodeState, NodeStatus
from launchpad_py.program import address

if TYPE_CHECKING:
    from launchpad_py.supervision.launch_kit.address_book import AddressBook
    from launchpad_py.supervision.launch_kit.metrics_probe import MetricsProbe

# A node that raised one of these failed because a node it called had failed or gone.
_CONSEQUENCES = (CourierUnavailableError, CourierCancelledError, PeerFailedError)


@dataclasses.dataclass
class FailureReport:
    """Why a node failed: its traceback text and, where rebuildable, the exception.

    ``by_scheduler``: a cluster scheduler ended the node (job cancelled, out of
    time, preempted); that is why the program ended even when the node's stop
    request (SIGTERM) reached the launcher first. ``lost_by``: the platform lost
    the node through no fault of its own, as a reason (``'evicted'``, ``'deleted'``,
    ``'preempted'``, ``'node_lost'``: a pod the cluster ended; ``'host_lost'``: an
    unreachable host; ``'node_failure'``: a failed Slurm node): an ``lp.Restart``
    group restarts it without counting against ``max_restarts``.
    """

    summary: str
    traceback: str
    exception: BaseException | None = None
    by_scheduler: bool = False
    #: The node's code raised (rather than its process dying or being killed).
    raised: bool = False
    lost_by: str | None = None

    @classmethod
    def from_exception(cls, exc: BaseException) -> 'FailureReport':
        text = ''.join(traceback.format_exception(exc))
        return cls(f'{type(exc).__name__}: {exc}', text, exc, raised=True)

    @property
    def raised_in(self) -> str | None:
        """Where a peer call the node made raised first: "method 'step' of node 'worker/1'"."""
        origin = getattr(self.exception, 'remote_origin', None)
        if origin is None:
            return None
        label, method = origin
        return f"method {method!r} of {f'node {label!r}' if label else 'a courier server'}"

    @property
    def follows_from_a_peer(self) -> bool:
        """True when the node failed only because a node it called had failed or gone."""
        if self.exception is not None:
            return isinstance(self.exception, _CONSEQUENCES)
        return self.summary.split(':', 1)[0] in {kind.__name__ for kind in _CONSEQUENCES}


# The supervisor's events: small records, each handled by one branch of the controller.

@dataclasses.dataclass(frozen=True)
class Ready:
    """The node of ``worker`` serves (or, without a server, runs)."""
    worker: 'Worker'


@dataclasses.dataclass(frozen=True)
class Exited:
    """The node of ``worker`` ended: its exit code (None for threads) and why, if it failed."""
    worker: 'Worker'
    exit_code: int | None
    failure: FailureReport | None


@dataclasses.dataclass(frozen=True)
class StopRequested:
    """``lp.stop()`` in a node, ``controller.stop()`` or Ctrl-C."""


@dataclasses.dataclass(frozen=True)
class ProcessDied:
    """A process of the program that runs no node (a fork server) died."""
    reason: str


@dataclasses.dataclass(frozen=True)
class LaunchAborted:
    """Starting a node raised: ``unstarted`` never started."""
    unstarted: tuple


@dataclasses.dataclass(frozen=True)
class GroupChange:
    """``add_nodes`` (``grow``: ``what`` is a count) or ``remove_nodes`` (``what``: (count,
    grace)); ``reply`` gets the workers chosen, or the error."""
    grow: bool
    label: str
    what: object
    reply: concurrent.futures.Future


@dataclasses.dataclass(frozen=True)
class Tick:
    """No event: a deadline came, or every node has ended."""


class Events:
    """The supervisor's inbox; workers call these from any thread, and the Ctrl-C handler too.

    A SimpleQueue, because its ``put`` is reentrant: a signal handler may post
    while the same thread is in the middle of posting (a second Ctrl-C arriving
    during the first one's handler). ``queue.Queue.put`` holds a lock there, and
    the nested post deadlocked the launcher.
    """

    def __init__(self) -> None:
        self.queue: queue.SimpleQueue = queue.SimpleQueue()

    def ready(self, worker: 'Worker') -> None:
        self.queue.put(Ready(worker))

    def exited(self, worker: 'Worker', exit_code: int | None, failure: FailureReport | None) -> None:
        self.queue.put(Exited(worker, exit_code, failure))

    def stop_requested(self) -> None:
        self.queue.put(StopRequested())

    def process_died(self, reason: str) -> None:
        """A process of the program that runs no node (a fork server) died: ``reason`` says how.

        Before every node is ready this fails the launch; afterwards it is only logged.
        """
        self.queue.put(ProcessDied(reason))


class Progress:
    """What callers outside the supervisor thread wait on: its changes, and the program's end.

    The supervisor calls ``changed()`` after every event it handled and ``end()`` last;
    ``add_nodes`` waits here for the nodes it asked for to settle.
    """

    def __init__(self) -> None:
        self.done = threading.Event()
        self._changed = threading.Condition()

    def changed(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def end(self) -> None:
        self.done.set()
        self.changed()

    def wait_for(self, predicate: Callable[[], bool], timeout: float | None) -> bool:
        """Waits until ``predicate()`` holds (checked after each change); False on timeout."""
        with self._changed:
            return self._changed.wait_for(predicate, timeout)


class Worker(abc.ABC):
    """One node's executable being run somewhere.

    A worker runs its node once. Where the launcher can run it again
    (``can_restart``), ``restarted()`` returns a fresh worker for the same node
    and address, which the controller starts in its place.
    """

    #: Whether ``restarted()`` works (a launcher that cannot restart rejects lp.Restart).
    can_restart = False
    #: Whether ``request_stop`` reaches this node alone (threads share one stop).
    can_stop_alone = True

    def __init__(self, label: str, index: int, description: str, events: Events):
        self.label, self.index, self.description = label, index, description
        self.events = events
        self.state = NodeState.STARTING
        self.exit_code: int | None = None
        self.failure: FailureReport | None = None
        # Set by the supervisor (time.time()), for uptimes in statistics.
        self.started_at: float | None = None
        self.ended_at: float | None = None
        self.restarts = 0        # How many workers ran this node before this one.
        #: Those restarts by why: 'failed' (counted by lp.Restart), or a ``lost_by`` reason.
        self.restart_reasons: dict[str, int] = {}
        self.removing = False    # Asked to stop alone (an elastic group shrinks).
        self.retired = False     # Replaced by its restart: its late events are ignored.
        self.left_running = False  # Removed, past its grace, and could not be killed (a thread).

    @property
    def name(self) -> str:
        return f'{self.label}/{self.index}'

    @property
    def pid(self) -> int | None:
        return None

    @property
    def host(self) -> str:
        """Where the node runs, as statuses show it."""
        return 'localhost'

    @abc.abstractmethod
    def start(self) -> None:
        """Starts the executable; must report ``ready`` and ``exited`` to ``events``."""

    @abc.abstractmethod
    def request_stop(self) -> None:
        """Delivers the program's stop request to this node."""

    @abc.abstractmethod
    def kill(self) -> bool:
        """Ends the node at once; False where that is impossible (threads)."""

    def restarted(self) -> 'Worker':
        """A new, unstarted worker for the same node, address and placement."""
        raise NotImplementedError(f'{type(self).__name__} cannot restart a node')

    def served(self) -> dict[str, str]:
        """Key -> 'host:port' of what the node's servers bound, as this process knows it."""
        return {}

    def tell_left(self, left: dict[str, tuple[str, str]]) -> None:
        """Tells the node's process that peers left for good: key -> (value, why); see
        ``Directory.retire``. (Nothing to tell a node in this process: it shares ours.)"""

    def send_members(self, table: dict) -> None:
        """Passes the live members of the program's groups on to the node (see group_handle)."""

    def watch_members(self, token: str) -> None:
        """The node uses group ``token``'s handle: it gets that group's tables from now on."""

    def output_tail(self) -> str:
        return ''

    def request_metrics(self) -> 'concurrent.futures.Future[dict] | None':
        """The node's own counters to come (see ``node_metrics``); None where it cannot say."""
        return None

    def stack(self, frames: dict | None = None) -> str:
        """Where a node that cannot be killed is stuck (threads only); ``frames``: a
        ``sys._current_frames()`` taken once for every stuck node."""
        return ''

    def cleanup(self) -> None:
        """Releases what the worker holds once the program is over."""


class MembersOverChannel:
    """For workers whose node has a control channel (``_channel``, guarded by ``_lock``):
    a group handle's member tables go over it once the node asked for them ('watch'), with
    each newer version after, and again when the node connects; so do the peers that left
    for good ('left')."""

    _members: dict | None = None
    _watched: frozenset = frozenset()
    _sent: dict | None = None

    def tell_left(self, left: dict[str, tuple[str, str]]) -> None:
        with self._lock:
            if self._channel is not None:
                self._channel.send('left', left)

    def send_members(self, table: dict) -> None:
        with self._lock:
            self._members = table
            if self._channel is not None:
                self._send_watched(self._channel)

    def watch_members(self, token: str) -> None:
        with self._lock:
            self._watched = self._watched | {token}
            if self._channel is not None:
                self._send_watched(self._channel)

    def _send_members_on_connect(self, channel) -> None:
        """Call with ``_lock`` held, as ``channel`` becomes ``_channel``."""
        self._sent = {}
        self._send_watched(channel)
        left = address.directory.left()  # Those that left before this node (re)started.
        if left:
            channel.send('left', left)

    def _send_watched(self, channel) -> None:
        """The watched groups' entries newer than what the node was sent (``_lock`` held)."""
        table, sent = self._members or {}, self._sent if self._sent is not None else {}
        newer = {token: table[token] for token in self._watched
                 if token in table and sent.get(token, 0) < table[token][0]}
        if newer:
            channel.send('members', newer)
            self._sent = {**sent, **{token: entry[0] for token, entry in newer.items()}}


def relay_node_messages(channel, worker: Worker, probe: MetricsProbe, where: str = '',
                        book: AddressBook | None = None) -> tuple[FailureReport | None, bool]:
    """Passes a node process's control messages on to the supervisor until the channel closes.

    Counters the node sends go to ``probe`` (whose open questions fail once the
    channel closes). The addresses it bound go to ``book``, which also answers
    its questions for others' (None: the launcher fixed every address); a node that
    ends without finishing has its addresses withdrawn until it reports again. Returns
    the failure the node reported (``where`` is added to its summary, e.g. the
    host) and whether it said it finished: what its exit means.
    """
    failure, finished = None, False
    reported: dict[str, str] = {}
    while True:
        try:
            message = channel.recv()
        except (EOFError, OSError):
            probe.close()
            if book is not None and not finished:  # It may come back, maybe elsewhere.
                book.withdraw(reported)
            return failure, finished
        kind = message[0]
        if kind == 'ready':
            if book is not None:
                book.report(message[1])
                reported.update(message[1])
            worker.events.ready(worker)
        elif kind == 'resolve' and book is not None:
            book.ask(message[1], lambda values, gone: channel.send('addresses', values, gone))
        elif kind == 'watch':
            worker.watch_members(message[1])
        elif kind == 'relocate' and book is not None:
            book.relocate(message[1], lambda values, gone: channel.send('addresses', values, gone))
        elif kind == 'stop_program':
            worker.events.stop_requested()
        elif kind == 'failed':
            _, summary, text, exception_bytes = message
            failure = FailureReport(summary + where, text,
                                    node_process.rebuild_exception(exception_bytes), raised=True)
        elif kind == 'finished':
            finished = True
        elif kind == 'metrics':
            probe.answer(message)
