"""A callable with its arguments, kept until a node runs.

Shared by the node types that build a user object or call a user function.
"""

from __future__ import annotations

import dataclasses
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
        for position, value in enumerate(self.args):
            yield f'args[{position}]', value
        yield from self.kwargs.items()

    def __call__(self) -> Any:
        """Calls the target with every handle in the arguments turned into a client."""
        args, kwargs = dereference_all((self.args, self.kwargs))
        return self.target(*args, **kwargs)
