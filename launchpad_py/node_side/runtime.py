"""The running program as seen from inside one process.

A ``ProgramScope`` holds the stop event and stop handlers of one program in
this process, and knows how to ask the program's launcher to stop everything.
Launchers create scopes (one per worker process, one shared by all threads
of a ``local_mt`` program) and bind node threads to them; ``lp.stop()`` and
friends find the scope of the calling thread here.

The same binding tells node code who it is: ``get_node_context()`` returns
the group label and index of the node the calling thread runs.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Callable

from launchpad_py import errors
from launchpad_py.courier import fail_fast
from launchpad_py.courier.errors import CourierCancelledError, CourierUnavailableError
from launchpad_py.node_side.stop_event import StopEvent

_log = logging.getLogger(__name__)


class ProgramScope:
    """Stop state of one program in this process, and the program's courier secret.

    ``servers``: the program's server addresses, to which calls fail fast
    once the program stops (see ``courier.fail_fast``); None means every
    server, right for a process that holds one node.
    """

    def __init__(self, name: str, request_program_stop: Callable[[], None] | None = None):
        self.name = name
        self.secret: bytes | None = None  # Set by the launcher; colocated children inherit it.
        self.stop_event = StopEvent()  # Thousands of node threads may wait on it: no convoy.
        self.servers: list[str] | None = None
        self._end_fail_fast: Callable[[], None] | None = None
        self._ended = False
        self._request_program_stop = request_program_stop or self.handle_stop
        self._handlers: list[Callable[[], None]] = []
        self._first: list[Callable[[], None]] = []  # Run before the handlers (checkpoints).
        self._lock = threading.Lock()
        self._stopping = False

    def request_program_stop(self) -> None:
        """Asks the launcher to stop the whole program; returns at once."""
        self._request_program_stop()

    def handle_stop(self) -> None:
        """Runs the stop handlers once, in registration order, then sets the stop event."""
        with self._lock:
            if self._stopping:
                return
            self._stopping = True
            handlers, self._handlers, self._first = self._first + self._handlers, [], []
            if not self._ended:  # Nodes now end in any order: never wait for one gone.
                self._end_fail_fast = fail_fast.fail_fast_on_unavailable(self.servers)
        for handler in handlers:
            try:
                handler()
            except Exception:  # One faulty handler must not stop the others.
                _log.exception('stop handler %r of program %r raised', handler, self.name)
        self.stop_event.set()

    def end(self) -> None:
        """The program is over here: calls to its servers wait for them again."""
        with self._lock:
            self._ended = True
            end, self._end_fail_fast = self._end_fail_fast, None
        if end is not None:
            end()

    def register_stop_handler(self, handler: Callable[[], None]) -> None:
        if not callable(handler):
            raise TypeError(f'a stop handler must be callable (got {handler!r})')
        with self._lock:
            if self._stopping:
                run_now = True
            else:
                self._handlers.append(handler)
                run_now = False
        if run_now:  # Registered after the stop: it still runs, once.
            handler()

    def run_first_on_stop(self, handler: Callable[[], None]) -> None:
        """Like a stop handler, but run before every stop handler: while the node is whole."""
        with self._lock:
            if not self._stopping:
                self._first.append(handler)
                return
        handler()

    def unregister_stop_handler(self, handler: Callable[[], None]) -> None:
        with self._lock:
            try:
                self._handlers.remove(handler)
            except ValueError:
                raise ValueError(f'{handler!r} is not a registered stop handler') from None


def node_scope(program: ProgramScope) -> ProgramScope:
    """A scope of its own for one node thread of ``program``, so that node can be stopped
    alone (a node leaving an elastic group under ``local_mt``): its stop handlers,
    checkpoint hooks and stop event are its own. The program's stop reaches it (it is one of
    the program's stop handlers), and its ``lp.stop()`` stops the program.
    ``end_node_scope`` detaches it once its node is over."""
    scope = ProgramScope(program.name, program.request_program_stop)
    scope.secret = program.secret
    scope.servers = []  # Calls fail fast at the program's stop (its scope's rule), not here.
    program.register_stop_handler(scope.handle_stop)
    return scope


def end_node_scope(program: ProgramScope, scope: ProgramScope) -> None:
    """``scope``'s node is over: the program's stop no longer reaches for it."""
    try:
        program.unregister_stop_handler(scope.handle_stop)
    except ValueError:  # The program's stop has run it already.
        pass


#: How long a node whose call found its peer gone waits for the stop that explains it.
STOP_NOTICE_SECONDS = 5.0


def ended_by_stop(exc: BaseException, scope: ProgramScope) -> bool:
    """Whether ``exc`` only says that the program is stopping: then the node ends quietly.

    While a program stops its servers go one by one, and a node still calling
    one gets ``CourierUnavailableError`` (or, its call cut short,
    ``CourierCancelledError``): that is the stop, not a failure. The
    stop may reach this node just after its call failed, hence the short wait.
    """
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, (CourierUnavailableError, CourierCancelledError)):
            return scope.stop_event.wait(STOP_NOTICE_SECONDS)
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


_thread_scope = threading.local()
_active: list[ProgramScope] = []
_active_lock = threading.Lock()
_default: ProgramScope | None = None


def activate(scope: ProgramScope) -> None:
    """Makes ``scope`` known to this process until ``deactivate``."""
    with _active_lock:
        _active.append(scope)


def deactivate(scope: ProgramScope) -> None:
    """Forgets ``scope`` once its program is over in this process."""
    with _active_lock:
        if scope in _active:
            _active.remove(scope)
    scope.end()


def bind_thread(scope: ProgramScope | None) -> None:
    """Makes ``scope`` the calling thread's program (node threads call this)."""
    _thread_scope.scope = scope


def current_scope() -> ProgramScope:
    """The calling thread's program; else the newest active one; else a process default.

    Threads a node starts itself are not bound, so they fall back to the newest
    program active in the process, which is their node's program unless one
    process hosts several programs at once.
    """
    global _default
    scope = getattr(_thread_scope, 'scope', None)
    if scope is not None:
        return scope
    with _active_lock:
        if _active:
            return _active[-1]
        if _default is None:
            _default = ProgramScope('default')
            _default.servers = []  # No program: a stop here must not change any call.
        return _default


@dataclasses.dataclass(frozen=True)
class NodeContext:
    """Who the running node is: its group ``label`` and its ``index`` in the group.

        seed = base_seed + lp.get_node_context().index
    """

    label: str
    index: int


_process_node: NodeContext | None = None


def bind_node(node: NodeContext, whole_process: bool = False) -> None:
    """Makes ``node`` the calling thread's node; ``whole_process`` when it owns the process."""
    global _process_node
    _thread_scope.node = node
    if whole_process:
        _process_node = node


def thread_node() -> NodeContext | None:
    """The node the calling thread was bound to, without the process-wide fallback."""
    return getattr(_thread_scope, 'node', None)


def process_node() -> NodeContext | None:
    """The node that owns this whole process, if one does (a node process)."""
    return _process_node


def inherit_binding() -> Callable[[], None]:
    """A function that gives the thread calling it the calling thread's program and node.

    Servers pass it as their thread-pool initializer, so handler threads know
    which node they serve.
    """
    scope = getattr(_thread_scope, 'scope', None)
    node = getattr(_thread_scope, 'node', None)

    def bind() -> None:
        _thread_scope.scope, _thread_scope.node = scope, node

    return bind


def get_node_context() -> NodeContext:
    """The label and index of the node running the calling thread.

    Threads a node starts itself inherit nothing, so in a process that holds one
    node they fall back to that node; under ``local_mt`` read the context in the
    node's own thread and pass it on.
    """
    node = getattr(_thread_scope, 'node', None) or _process_node
    if node is None:
        raise errors.NotRunningError(
            'lp.get_node_context() was called outside a node: call it from the thread that '
            'runs a node (its constructor, run() or function), or pass the result to threads '
            'you start yourself when several nodes share a process (local_mt)')
    return node
