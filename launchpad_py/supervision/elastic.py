"""Elastic groups and group handles: the part of supervision that grows and shrinks groups.

    controller.add_nodes('actor', 2)      # two more copies of the group's first node
    controller.remove_nodes('actor', 1)   # the newest live one stops, gracefully

A new node is a copy of its group's first node with the next free index
and an address of its own (read ``lp.get_node_context().index`` in the node
to tell copies apart). Removal asks the newest live members to stop and
kills them after the grace period; they end as ``STOPPED``. Both requests
go through the supervisor thread like every state change, and return once
the new nodes are ready or the removed ones are gone. Group handles follow
every change (``membership.py``).

The part checks requests, chooses the nodes and keeps group handles current; the
supervisor starts what it grows (``start``), as it starts restarts.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import time
from typing import Callable

from launchpad_py import errors
from launchpad_py.courier import serialization
from launchpad_py.supervision.membership import Membership
from launchpad_py.supervision.worker import (ENDED as _ENDED, Events, GroupChange, NodeState,
                                             Progress, Worker)
from launchpad_py.program import (AbstractAddressBuilder, Executable, Node, Program, address,
                                  failure_policy, group_handle)

_log = logging.getLogger('launchpad_py.supervision.controller')
_LIVE = (NodeState.STARTING, NodeState.RUNNING, NodeState.RESTARTING)


@dataclasses.dataclass
class Groups:
    """What the controller knows of a program's groups: which are elastic, how to grow one,
    and the members its group handles follow."""

    labels: set[str]
    elastic: set[str]
    membership: Membership | None
    grow: Callable[[str, int], Worker] | None  # (label, new index) -> an unstarted worker


def clone_node(template: Node, label: str, index: int,
               builder: AbstractAddressBuilder | None) -> Node:
    """A copy of ``template`` as node ``index`` of ``label``, with addresses of its own
    (late-bound, or from ``builder`` where the launcher assigns them)."""
    node = serialization.loads(serialization.dumps(template))
    node._on_added(label, index)
    for address in node.addresses:
        address.renew()
        if builder is not None:
            address.bind(builder)
    return node


def groups_of(program: Program, new_worker: Callable[[Executable, bytes], Worker] | None,
              builder: AbstractAddressBuilder | None = None) -> Groups:
    """The launcher's ``Groups``: ``new_worker(executable, pickled)`` makes a worker for a
    node added at run time (None: this launcher cannot add nodes)."""
    empty = sorted(program.elastic_groups - set(program.groups))
    if empty:
        raise errors.ProgramError(
            f'elastic groups {empty} of program {program.name!r} have no nodes: add at least '
            'one inside "with program.group(label, elastic=True):" (new nodes copy the first)')
    membership = Membership(program) if program.group_handles else None

    def grow(label: str, index: int) -> Worker:
        node = clone_node(program.groups[label][0], label, index, builder)
        executables = node.to_executables()
        if len(executables) != 1:
            raise errors.ProgramError(f'{node.description} makes {len(executables)} executables; '
                                      'an elastic group copies nodes that make one')
        if membership is not None:
            membership.add_member(label, index, node.create_handle())
        return new_worker(executables[0], serialization.dumps(executables[0]))

    return Groups(set(program.groups), program.elastic_groups, membership,
                  grow if new_worker is not None else None)


class ElasticGroups:
    """Growing and shrinking the elastic groups of one program, and its group handles.

    ``workers`` is the controller's list (new nodes are appended to it); ``alarms`` holds
    each removal's deadline, keyed ``('remove', worker)``; requests reach the supervisor
    through ``inbox`` and their callers wait on ``progress``.
    """

    def __init__(self, name: str, launch_type: str, groups: Groups | None, workers: list[Worker],
                 alarms: failure_policy.Alarms, inbox: Events, progress: Progress):
        self._name = name
        self._launch_type = launch_type
        self._groups = groups
        self._membership = groups.membership if groups is not None else None
        self._workers = workers
        self._alarms = alarms
        self._inbox = inbox
        self._progress = progress

    @property
    def members(self) -> dict:
        """The live members of every group with a handle (for a node that starts now)."""
        return self._membership.table if self._membership else {}

    # -- on the caller's thread -------------------------------------------------------

    def change(self, kind: str, label: str, what, timeout: float | None,
               settled: Callable[[Worker], bool]) -> list[Worker]:
        """Checks the request and hands it to the supervisor; returns the workers it chose
        once each has ``settled``. ``what``: the count to add, or (count, grace) to remove."""
        self._check(label, what if kind == 'grow' else what[0])
        reply: concurrent.futures.Future = concurrent.futures.Future()
        self._inbox.queue.put(GroupChange(kind == 'grow', label, what, reply))
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        done = self._progress.done
        self._progress.wait_for(lambda: reply.done() or done.is_set(), left())
        if not reply.done():
            raise (errors.NotRunningError(f'program {self._name!r} has ended: cannot change '
                                          f'group {label!r}') if done.is_set() else
                   TimeoutError(f'program {self._name!r} did not take the request within '
                                f'{timeout}s'))
        chosen = reply.result()
        if not self._progress.wait_for(lambda: all(settled(w) for w in chosen), left()):
            raise TimeoutError(f'nodes {[w.name for w in chosen]} of program {self._name!r} '
                               f'did not {"start" if kind == "grow" else "end"} within '
                               f'{timeout}s')
        return chosen

    def _check(self, label: str, count) -> None:
        groups = self._groups
        if groups is None or label not in groups.labels:
            known = sorted(groups.labels) if groups else sorted({w.label for w in self._workers})
            raise errors.ProgramError(f'program {self._name!r} has no group {label!r}; its '
                                      f'groups are {known}')
        if label not in groups.elastic:
            raise errors.ProgramError(
                f'group {label!r} of program {self._name!r} is not elastic: declare it with '
                f'"with program.group({label!r}, elastic=True):" to add or remove nodes while '
                'the program runs')
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise errors.ProgramError(f'count must be an int >= 1 (got {count!r} for group '
                                      f'{label!r} of program {self._name!r})')

    def unsupported(self) -> str | None:
        """Why this launch cannot run the program's elastic groups, if it cannot."""
        groups = self._groups
        for label in sorted(groups.elastic if groups else ()):
            alone = [w for w in self._workers if w.label == label and not w.can_stop_alone]
            if groups.grow is None or alone:
                return (f'group {label!r} of program {self._name!r} is elastic, but '
                        f'{self._launch_type} cannot add nodes to a running program or stop one '
                        'alone; run it with a launcher that can, or make the group not elastic')
        return None

    # -- on the supervisor thread -----------------------------------------------------

    def apply(self, change: GroupChange, stopping: bool, grace: float,
              start: Callable[[Worker], None]) -> None:
        """Grows or shrinks a group and answers the request; ``start`` starts a new worker,
        ``grace`` is how long a removed node has unless the request says."""
        label, what, reply = change.label, change.what, change.reply
        if stopping:
            reply.set_exception(errors.NotRunningError(
                f'program {self._name!r} is stopping: cannot change group {label!r}'))
            return
        try:
            chosen = (self._grow(label, what, start) if change.grow else
                      self._shrink(label, *what, grace))
        except Exception as exc:  # Reported to the caller; the program runs on.
            reply.set_exception(exc)
            return
        self.publish()
        reply.set_result(chosen)

    def _grow(self, label: str, count: int, start: Callable[[Worker], None]) -> list[Worker]:
        first = 1 + max(w.index for w in self._workers if w.label == label)
        new = [self._groups.grow(label, first + offset) for offset in range(count)]
        _log.info('program %r: adding %s', self._name, ', '.join(w.name for w in new))
        for worker in new:
            self._workers.append(worker)
            start(worker)
        return new

    def _shrink(self, label: str, count: int, grace: float | None,
                default_grace: float) -> list[Worker]:
        live = [w for w in self._workers if w.label == label and w.state in _LIVE
                and not w.removing]
        if count > len(live):
            raise errors.ProgramError(f'group {label!r} of program {self._name!r} has '
                                      f'{len(live)} live nodes: cannot remove {count}')
        chosen = sorted(live, key=lambda w: w.index, reverse=True)[:count]
        _log.info('program %r: removing %s', self._name, ', '.join(w.name for w in chosen))
        for worker in chosen:
            worker.removing = True
            self._retire(worker)
        self.publish()  # Out of the group handles before they stop: a watcher rarely calls one.
        for worker in chosen:
            if worker.state == NodeState.RESTARTING:  # Nothing runs: it ends here.
                self._alarms.cancel(('restart', worker))
                worker.state, worker.ended_at = NodeState.STOPPED, time.time()
            else:
                worker.request_stop()
                self._alarms.set(('remove', worker), time.monotonic() + (
                    default_grace if grace is None else grace))
        return chosen

    def _retire(self, leaving: Worker) -> None:
        """Every process of the program learns, before ``leaving`` stops, that it left for
        good: a call to it then fails saying so, instead of waiting for it as for a node
        that restarts (the table above only says who is live: a caller may hold its client,
        and a call made once its server is gone waited for it for ever)."""
        why = (f'node {leaving.name!r} left its group {leaving.label!r} for good (removed from '
               f'the elastic group by remove_nodes; program {self._name!r})')
        served = leaving.served()
        if not served:
            return
        address.directory.retire(served, why)
        left = {key: (value, why) for key, value in served.items()}
        for worker in self._workers:
            if worker is not leaving and worker.state not in _ENDED and not worker.retired:
                worker.tell_left(left)

    def publish(self) -> None:
        """Tells the launching process and every node when a group's live members changed."""
        table = self._membership.update(self._workers) if self._membership else None
        if table is None:
            return
        group_handle.publish(table)
        for worker in self._workers:
            if worker.state not in _ENDED and not worker.retired:
                worker.send_members(table)
