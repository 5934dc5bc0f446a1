"""``PyNode`` runs a function; ``PyClassNode`` builds an object and calls its ``run()``.

    p.add_node(lp.PyNode(train, learner_handle, steps=1000), label='trainer')
    p.add_node(lp.PyClassNode(Evaluator, learner_handle), label='evaluator')
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Iterator

from launchpad_py.node_side import checkpoints
from launchpad_py.nodes.deferred_call import DeferredCall, target_name
from launchpad_py.program.handle import Handle
from launchpad_py.program.node import ExecutionContext, Executable, Node

_log = logging.getLogger(__name__)


class _NoHandle(Handle[None]):
    """Python nodes serve nothing: their handles dereference to None."""

    def dereference(self) -> None:
        return None


@dataclasses.dataclass
class _CallFunction:
    call: DeferredCall
    run_enabled: bool

    def __call__(self, context: ExecutionContext) -> None:
        context.report_ready()
        if self.run_enabled:
            self.call()


@dataclasses.dataclass
class _BuildAndRun:
    call: DeferredCall
    run_enabled: bool

    def __call__(self, context: ExecutionContext) -> None:
        context.report_ready()
        obj = self.call()
        checkpoints.register_object(obj)
        if self.run_enabled:
            run = getattr(obj, 'run', None)
            if not callable(run):
                # The original Launchpad warns and lets the node end; programs rely on it.
                _log.warning('%s built by PyClassNode %r has no run() method: the node ends '
                             'after construction', type(obj).__name__, context.label)
                return
            run()


class _PythonNode(Node):
    def __init__(self, target: Callable, *args, **kwargs):
        super().__init__()
        self._call = DeferredCall(target, args, kwargs)

    def _target_name(self) -> str:
        return target_name(self._call.target)

    def arguments(self) -> Iterator[tuple[str, Any]]:
        return self._call.arguments()

    def create_handle(self) -> Handle[None]:
        return _NoHandle()


class PyNode(_PythonNode):
    """Calls ``function(*args, **kwargs)``; the node ends when it returns."""

    def __init__(self, function: Callable, *args, **kwargs):
        super().__init__(function, *args, **kwargs)

    def to_executables(self) -> list[Executable]:
        body = _CallFunction(self._call, self._run_enabled)
        return [Executable(self.label, self.index, self.description, body, [])]


class PyClassNode(_PythonNode):
    """Builds ``constructor(*args, **kwargs)`` and calls its ``run()`` (unless run is disabled)."""

    def __init__(self, constructor: Callable, *args, **kwargs):
        super().__init__(constructor, *args, **kwargs)

    def to_executables(self) -> list[Executable]:
        body = _BuildAndRun(self._call, self._run_enabled)
        return [Executable(self.label, self.index, self.description, body, [])]
