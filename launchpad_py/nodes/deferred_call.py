"""A callable with its arguments, kept until a node runs.

Shared by the node types that build a user object or call a user function.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable, Iterator

from launchpad_py.program.handle import dereference_all


def target_name(target: Callable) -> str:
    return getattr(target, '__qualname__', None) or getattr(target, '__name__', None) or repr(target)


@dataclasses.dataclass
class DeferredCall:
    target: Callable
    args: tuple
    kwargs: dict

    def __post_init__(self) -> None:
        if not callable(self.target):
            raise TypeError(f'a node needs a callable class or function (got {self.target!r})')

    def arguments(self) -> Iterator[tuple[str, Any]]:
        """(name, value) per argument; positional ones named after the target's parameters."""
        names = _positional_names(self.target, len(self.args))
        yield from zip(names, self.args)
        yield from self.kwargs.items()

    def __call__(self) -> Any:
        """Calls the target with every handle in the arguments turned into a client."""
        args, kwargs = dereference_all((self.args, self.kwargs))
        return self.target(*args, **kwargs)


def _positional_names(target: Callable, count: int) -> list[str]:
    """``['learner', 'config']`` for ``Actor(learner, config)``; ``args[i]`` where unknown."""
    names: list[str] = []
    try:
        parameters = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):  # Some builtins have no signature.
        parameters = []
    for parameter in parameters:
        if parameter.kind == parameter.VAR_POSITIONAL:
            names += [f'{parameter.name}[{i}]' for i in range(count - len(names))]
        elif parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            names.append(parameter.name)
        if len(names) >= count:
            break
    names += [f'args[{i}]' for i in range(len(names), count)]
    return names[:count]
