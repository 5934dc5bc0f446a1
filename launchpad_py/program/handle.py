"""Handles: what ``add_node`` returns, and what becomes a client at execution time.

A handle passed to another node's constructor draws an edge in the graph.
When the receiving node runs, every handle in its arguments, at any depth of
lists, tuples, dicts and sets, is replaced by ``handle.dereference()``.
"""

from __future__ import annotations

import abc
from typing import Any, Generic, Iterator, TypeVar

T = TypeVar('T')


class Dereferenceable(abc.ABC, Generic[T]):
    """Something in a node's arguments that is replaced by ``dereference()`` when it runs."""

    @abc.abstractmethod
    def dereference(self) -> T:
        """The value the running node receives in place of this object."""

    def arguments(self) -> tuple:
        """Values this object holds that may contain handles (edges of the graph)."""
        return ()


class Handle(Dereferenceable[T], Generic[T]):
    """A reference to a node that turns into a client inside a running program."""

    def __getattr__(self, name: str) -> Any:
        # Only names the handle lacks get here: a method of the node, called on the handle.
        if name.startswith('_'):
            raise AttributeError(name)
        raise AttributeError(
            f'{self!r} has no attribute {name!r}: a handle is not a client. It becomes a client '
            f'of its node inside a running node that received it among its arguments. To call '
            f'the node from the launching script, launch the program first and call '
            f'handle.dereference().{name}(...)')


def _children(obj: Any) -> Iterator[Any]:
    if isinstance(obj, Dereferenceable):
        yield from obj.arguments()
    elif isinstance(obj, dict):
        yield from obj.keys()
        yield from obj.values()
    elif isinstance(obj, (list, tuple, set, frozenset)):
        yield from obj


def find_handles(obj: Any) -> list[Handle]:
    """Every handle inside ``obj``, depth first."""
    if isinstance(obj, Handle):
        return [obj]
    found: list[Handle] = []
    for child in _children(obj):
        found.extend(find_handles(child))
    return found


def dereference_all(obj: Any) -> Any:
    """``obj`` with each handle (or other Dereferenceable) replaced; containers are rebuilt."""
    if isinstance(obj, Dereferenceable):
        return obj.dereference()
    if isinstance(obj, dict):
        return type(obj)((dereference_all(k), dereference_all(v)) for k, v in obj.items())
    if isinstance(obj, tuple) and hasattr(obj, '_fields'):  # namedtuple
        return type(obj)(*(dereference_all(v) for v in obj))
    if isinstance(obj, (list, tuple, set, frozenset)):
        return type(obj)(dereference_all(v) for v in obj)
    return obj
