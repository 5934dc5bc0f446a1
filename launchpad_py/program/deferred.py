"""``Deferred``: build an object inside the node that receives it, not at setup.

    env = lp.Deferred(gym.make, 'CartPole-v1')       # unpicklable once built
    p.add_node(lp.CourierNode(Actor, env, learner), label='actor')  # built in the actor

Handles among a Deferred's own arguments are dereferenced first, so a deferred
object can hold clients of other nodes.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Generic, TypeVar

from launchpad_py.program.handle import Dereferenceable, dereference_all

T = TypeVar('T')


class Deferred(Dereferenceable[T], Generic[T]):
    """A constructor call carried to the node and made there (once per process)."""

    def __init__(self, constructor: Callable[..., T], *args, **kwargs):
        if not callable(constructor):
            raise TypeError(f'Deferred needs a callable (got {constructor!r})')
        self._constructor, self._args, self._kwargs = constructor, args, kwargs
        self._lock = threading.Lock()
        self._built = False
        self._value: Any = None

    def arguments(self) -> tuple:
        return (self._args, self._kwargs)

    def dereference(self) -> T:
        with self._lock:
            if not self._built:
                args, kwargs = dereference_all((self._args, self._kwargs))
                try:
                    self._value = self._constructor(*args, **kwargs)
                except Exception as exc:
                    name = getattr(self._constructor, '__qualname__', repr(self._constructor))
                    raise RuntimeError(f'constructing lp.Deferred({name}) failed: {exc}') from exc
                self._built = True
            return self._value

    def __getstate__(self):
        return {'_constructor': self._constructor, '_args': self._args, '_kwargs': self._kwargs}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._built, self._value = False, None


def maybe_dereference(obj: Any) -> Any:
    """``obj.dereference()`` for handles and deferred objects; anything else unchanged."""
    return obj.dereference() if isinstance(obj, Dereferenceable) else obj
