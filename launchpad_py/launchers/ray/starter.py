"""``RayStarter``: how ``launchers/remote/`` starts one node in a Ray actor, and hears it end.

The actor (``node_host.NodeHost``) says where Ray placed it, then hands over the
node's output in batches and finally its exit code; a call failing because the actor
died (killed, its host lost) is how the launcher learns of a death it did not ask for,
within Ray's own failure detection (the raylet sees its worker process exit at once).
Ray also says why an actor died, which tells the node's own failures from the cluster's
(``lost_reason``): its Ray node died or was preempted, or Ray's memory monitor killed it
because its host ran low on memory. Those restart under ``lp.Restart`` without counting,
in a new actor wherever Ray places it (the old host may be gone).
"""

from __future__ import annotations

import collections
import itertools
import json
import logging
import threading
import time
from typing import Any, Callable

from launchpad_py import errors
from launchpad_py.launchers.ray.checkpoint_cleanup import Visits
from launchpad_py.launchers.ray.shared_actor import SharedActor
from launchpad_py.launchers.remote.worker import Starter
from launchpad_py.node_side import node_process

#: How often a node whose actor Ray has not placed yet says so, with what it asks.
PENDING_NOTE_S = 10.0
#: How long one call for a node's output waits for a line (it returns at once when one comes).
OUTPUT_WAIT_S = 30.0
#: How long to wait before asking again for the output of an actor Ray calls unavailable
#: (unreachable, not yet declared dead: its host's raylet may be gone).
UNAVAILABLE_RETRY_S = 0.5
_log = logging.getLogger(__name__)
_STARTS = itertools.count(1)


class RayStarter(Starter):
    """One node in a Ray actor it may share with other nodes of its group (``share``), in
    ``slot`` of the actor's ``share.slots``. ``pin``: a Ray node id a new actor must land
    on, for a restart that keeps the node's address. ``visits``: where the launch's nodes
    ran, for the clean-up at its end."""

    def __init__(self, share: SharedActor, name: str, slot: int, env: dict[str, str],
                 pin: str | None = None, asks: dict[str, float] | None = None,
                 visits: Visits | None = None):
        self._share, self._name, self._slot = share, name, slot
        self._visits = visits or Visits()
        self._env, self._pin, self._asks = env, pin, asks or {}
        self._key = f'{name}#{next(_STARTS)}'  # Unique per start: a restart's output is its own.
        self._actor = None
        self._started = None  # The reference to where the actor runs, once it has started.
        self._buffer: collections.deque[bytes] = collections.deque()
        self._finished = False
        self.placed: dict | None = None  # node_id, host, gpus: where Ray put it.
        self._code: int | None = None
        self._death: str | None = None
        self._lost: str | None = None  # ``lost_reason`` of the death, if not the node's fault.
        self._terminating = False
        self._ended = threading.Event()
        self._placed = threading.Event()
        self._lock = threading.Lock()

    def start(self, boot: dict, sink) -> None:
        with self._lock:
            if self._terminating:  # Stopped before it started: nothing will run.
                self._ended.set()
                return
            try:
                self._actor = self._share.join(self._key, self._pin)
            except (TypeError, ValueError) as exc:  # Options Ray refuses (a bad runtime_env).
                raise errors.LaunchError(f'Ray refused the actor of node {sink.name}: {exc}') \
                    from exc
        self._visits.secret.saw(boot)
        line = json.dumps(boot).encode() + b'\n'
        self._started = self._actor.start.remote(self._key, line, self._env, self._slot,
                                                 self._share.slots)
        sink.follow(self)
        threading.Thread(target=self._say_why_it_waits, args=(sink,), daemon=True,
                         name='lp-ray-pending').start()

    def _say_why_it_waits(self, sink) -> None:
        """Every ``PENDING_NOTE_S`` until Ray places the actor: what it asks, what is free."""
        import ray
        while not self._placed.wait(PENDING_NOTE_S) and not self._ended.is_set():
            free = {name: amount for name, amount in ray.available_resources().items()
                    if name in self._asks}
            if all(free.get(name, 0) >= amount for name, amount in self._asks.items()):
                text = (f'Ray has not started the actor yet: it asks {self._asks} and the '
                        'cluster has room (Ray is still starting worker processes)')
            else:
                text = (f'Ray has not placed the actor yet: it asks {self._asks}, the cluster '
                        f'has {free} free')
            _log.warning('%s: %s', sink.name, text)
            sink.note(text)

    def readline(self) -> bytes:
        """The node's next output line (b'' at its end): ``Sink.follow`` reads us as a stream."""
        import ray
        while not self._buffer:
            if self._finished:
                return b''
            try:
                if self.placed is None:
                    self.placed = ray.get(self._started)
                    self._visits.placed(self.placed['node_id'])
                    self._placed.set()
                    continue
                lines, code, self._finished = ray.get(
                    self._actor.output.remote(self._key, OUTPUT_WAIT_S))
            except ray.exceptions.ActorUnavailableError:
                # Unreachable, not dead yet: Ray declares it dead (its host lost) or it answers.
                if self._terminating:
                    self._finished = True
                    return b''
                time.sleep(UNAVAILABLE_RETRY_S)
                continue
            except ray.exceptions.RayError as exc:
                self._death, self._finished = _cause(exc), True
                self._lost = lost_reason(exc, _node_alive(ray, self.placed))
                self._share.lost(self._actor)
                return b''
            self._buffer.extend(lines)
            self._code = code
        return self._buffer.popleft()

    def close(self) -> None:
        """The end of the output stream, or of the program: either way this node is done."""
        self._ended.set()
        self._placed.set()
        if self._actor is not None:
            self._share.stop(self._key)
            self._share.leave(self._key)

    def wait(self) -> int | None:
        self._ended.wait()
        return self._code

    def terminate(self) -> bool:
        with self._lock:
            self._terminating = True
        return self._actor is not None and self._share.stop(self._key)

    def describe_exit(self, code: int | None) -> str:
        if code is None:
            return f'its Ray actor died: {self._death or "no exit code"}'
        return node_process.describe_exit(code)

    def taken_away(self) -> str | None:
        if self._death is not None and not self._terminating:
            return f'Ray ended the actor of the node: {self._death}'
        return None

    def lost_by(self) -> str | None:
        return self._lost if self.taken_away() is not None else None

    def host_gone(self) -> bool:
        return self.lost_by() is not None

    def again(self, host: str | None) -> 'RayStarter':
        """The same node again: in its actor while that lives, else in a new one on the Ray
        node the last one ran on (the node keeps its address, which its clients hold), or,
        when Ray lost that node, wherever Ray places it (its clients follow its new address)."""
        pin = (self.placed or {}).get('node_id') if host and self._lost is None else None
        return RayStarter(self._share, self._name, self._slot, self._env, pin, self._asks,
                          self._visits)


def _cause(exc: BaseException) -> str:
    """Ray's reason for an actor's death, in a line. The first line of its message is the
    same for every death ("The actor died unexpectedly..."); the cause is the first untabbed
    line after the actor's tabbed fields."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    told = [line for line in lines[1:] if not line.startswith('\t')]
    return (told or lines or [type(exc).__name__])[0].strip()


def lost_reason(exc: BaseException, node_alive: bool | None) -> str | None:
    """``FailureReport.lost_by`` for an actor Ray ended though neither the node nor the
    launcher asked: ``'preempted'`` (its Ray node drained for preemption), ``'node_lost'``
    (its Ray node died: the raylet, the host), ``'evicted'`` (Ray's memory monitor killed it as
    its host ran low on memory, as a kubelet evicts); None for the node's own doing (its
    process ended, ``ray.kill``) or a cause Ray does not give. ``node_alive``: whether the
    Ray node it ran on is alive now (None: unknown)."""
    text = str(exc)
    if getattr(exc, 'preempted', False):
        return 'preempted'
    if 'its node has died' in text or node_alive is False:
        return 'node_lost'
    if 'low on memory' in text:
        return 'evicted'
    return None


def _node_alive(ray, placed: dict | None) -> bool | None:
    """Whether the Ray node ``placed`` names is alive, as the cluster's table says."""
    node_id = (placed or {}).get('node_id')
    if node_id is None:
        return None
    try:
        return any(node['NodeID'] == node_id and node['Alive'] for node in ray.nodes())
    except Exception:  # The driver lost the cluster: nothing can be told.
        return None
