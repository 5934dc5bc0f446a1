"""Colocation: several nodes sharing one process (as threads) or one supervisor (as processes).

    learner_node = lp.CourierNode(Learner, replay)
    learner = learner_node.create_handle()
    replay_node = lp.ReverbNode(make_tables)
    replay = replay_node.create_handle()
    p.add_node(lp.MultiThreadingColocation([learner_node, replay_node]), label='learner')

The colocated nodes are not added to the program themselves; each keeps its
own address and handle, and takes the colocation's label and index.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from typing import Any, Iterator, Sequence

from launchpad_py import errors
from launchpad_py.node_side import runtime
from launchpad_py.nodes.colocation_processes import RunProcesses
from launchpad_py.program.address import Address
from launchpad_py.program.handle import Handle
from launchpad_py.program.node import ExecutionContext, Executable, Node


class ColocationHandle(Handle[list]):
    """Dereferences to the list of the colocated nodes' clients, in order."""

    def __init__(self, handles: list[Handle]):
        self.handles = handles

    def dereference(self) -> list:
        return [handle.dereference() for handle in self.handles]


class _Colocation(Node):
    """What both kinds share: the children, their addresses, their label and index."""

    def __init__(self, nodes: Sequence[Node]):
        super().__init__()
        nodes = list(nodes) if isinstance(nodes, (list, tuple)) else nodes
        if not isinstance(nodes, list) or not nodes or not all(isinstance(n, Node) for n in nodes):
            raise errors.ProgramError(
                f'{type(self).__name__} takes a non-empty list of nodes such as '
                f'[lp.CourierNode(Learner), lp.ReverbNode(make_tables)] (got {nodes!r})')
        for node in nodes:
            if node.label is not None:
                raise errors.ProgramError(
                    f'{node.description} is already in a program and cannot be colocated too: '
                    'pass the node itself, not added, and take its handle with '
                    'node.create_handle()')
        self._nodes = nodes

    @property
    def nodes(self) -> list[Node]:
        return list(self._nodes)

    @property
    def addresses(self) -> list[Address]:
        return [address for node in self._nodes for address in node.addresses]

    def _on_added(self, label: str, index: int) -> None:
        super()._on_added(label, index)
        for position, node in enumerate(self._nodes):
            node._on_added(label, index)
            node._name_addresses(f'{label}/{index}/{position}')  # Siblings share label/index.

    def _target_name(self) -> str:
        return ', '.join(node._target_name() for node in self._nodes)

    def arguments(self) -> Iterator[tuple[str, Any]]:
        for position, node in enumerate(self._nodes):
            for name, value in node.arguments():
                yield f'nodes[{position}].{name}', value

    def create_handle(self) -> ColocationHandle:
        return ColocationHandle([node.create_handle() for node in self._nodes])

    def _child_executables(self) -> list[Executable]:
        return [e for node in self._nodes for e in node.to_executables()]

    def _executable(self, body) -> list[Executable]:
        return [Executable(self.label, self.index, self.description, body, self.addresses)]


class _ReadyCounter:
    """Reports the colocation ready once every child has reported (or ended)."""

    def __init__(self, count: int, report_ready):
        self._pending = set(range(count))
        self._report_ready = report_ready
        self._lock = threading.Lock()

    def report(self, child: int) -> None:
        with self._lock:
            was_pending = bool(self._pending)
            self._pending.discard(child)
            now_done = was_pending and not self._pending
        if now_done:
            self._report_ready()


@dataclasses.dataclass
class _RunThreads:
    """The executable body of a ``MultiThreadingColocation``."""

    children: list[Executable]
    return_on_first_completed: bool

    def __call__(self, context: ExecutionContext) -> None:
        scope = runtime.current_scope()
        ready = _ReadyCounter(len(self.children), context.report_ready)
        ended: queue.Queue = queue.Queue()
        for position, child in enumerate(self.children):
            threading.Thread(target=_run_child, args=(position, child, context, scope, ready, ended),
                             name=f'lp-colocated-{child.label}/{child.index}-{position}',
                             daemon=True).start()
        for _ in self.children:
            position, failure = ended.get()
            if failure is not None:
                failure.add_note(f'raised by {self.children[position].description}, colocated '
                                 f'in node {context.label!r} (index {context.index})')
                raise failure
            if self.return_on_first_completed:
                return


def _run_child(position: int, child: Executable, context: ExecutionContext,
               scope: runtime.ProgramScope, ready: _ReadyCounter, ended: queue.Queue) -> None:
    runtime.bind_thread(scope)
    runtime.bind_node(runtime.NodeContext(child.label, child.index))
    child_context = ExecutionContext(child.label, child.index, context.bind_host,
                                     lambda: ready.report(position), context.stop_event)
    try:
        child.main(child_context)
    except BaseException as exc:  # The colocation re-raises it, so the launcher sees it.
        ended.put((position, exc))
    else:
        ready.report(position)  # A child that ends without reporting must not block readiness.
        ended.put((position, None))


class MultiThreadingColocation(_Colocation):
    """Runs ``nodes`` as threads of one process.

    A child that raises fails the whole colocation (and so, by default, the
    program). The colocation ends when every child has returned, or with
    ``return_on_first_completed=True`` when the first one has.
    """

    def __init__(self, nodes: Sequence[Node], return_on_first_completed: bool = False):
        super().__init__(nodes)
        self._return_on_first_completed = bool(return_on_first_completed)

    def to_executables(self) -> list[Executable]:
        return self._executable(_RunThreads(self._child_executables(),
                                            self._return_on_first_completed))


class MultiProcessingColocation(_Colocation):
    """Runs ``nodes`` as processes under one supervisor process on one machine.

    A child that fails is restarted up to ``num_retries_on_failure`` times
    (counted per child); one more failure fails the colocation.
    """

    def __init__(self, nodes: Sequence[Node], num_retries_on_failure: int = 0):
        super().__init__(nodes)
        if (isinstance(num_retries_on_failure, bool) or not isinstance(num_retries_on_failure, int)
                or num_retries_on_failure < 0):
            raise ValueError('MultiProcessingColocation num_retries_on_failure must be an int '
                             f'>= 0 (got {num_retries_on_failure!r})')
        self._retries = num_retries_on_failure

    def to_executables(self) -> list[Executable]:
        return self._executable(RunProcesses(self._child_executables(), self._retries))


def ColocationNode(nodes: Sequence[Node], mode: str = 'threads', **options) -> _Colocation:
    """``mode='threads'`` is ``MultiThreadingColocation``, ``'processes'`` is ``MultiProcessingColocation``."""
    kinds = {'threads': MultiThreadingColocation, 'processes': MultiProcessingColocation}
    if mode not in kinds:
        raise ValueError(f"ColocationNode mode must be 'threads' or 'processes' (got {mode!r})")
    return kinds[mode](nodes, **options)
