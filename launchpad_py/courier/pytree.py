"""Just enough of a pytree library for batching: flatten, unflatten, stack, split.

Containers are dicts, tuples, namedtuples, dataclass instances and None;
everything else is a leaf, lists included: the original Launchpad batches a
list argument as one value (the batched function gets the list of the
callers' lists), so a list is never opened here. No dependency on jax or
dm-tree.

numpy is imported on first use, not with the module: every ``launchpad_py`` import loads
this one (through ``courier.batching``), and a node that never batches numbers should not
pay numpy's 13 MiB (a thousand single-node pods on one machine, issue 25).
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any


def flatten(tree: Any) -> tuple[list, Any]:
    """The leaves of ``tree`` in a fixed order, and its structure."""
    leaves: list = []
    return leaves, _flatten(tree, leaves)


def _flatten(tree: Any, leaves: list) -> Any:
    if tree is None:
        return ('none',)
    if isinstance(tree, dict):
        keys = sorted(tree, key=repr)
        return ('dict', type(tree), tuple(keys), tuple(_flatten(tree[k], leaves) for k in keys))
    if isinstance(tree, tuple) and hasattr(type(tree), '_fields'):
        return ('namedtuple', type(tree), tuple(_flatten(v, leaves) for v in tree))
    if isinstance(tree, tuple):
        return ('tuple', type(tree), tuple(_flatten(v, leaves) for v in tree))
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        names = tuple(f.name for f in dataclasses.fields(tree))
        return ('dataclass', type(tree), names,
                tuple(_flatten(getattr(tree, n), leaves) for n in names))
    leaves.append(tree)
    return ('leaf',)


def unflatten(structure: Any, leaves: list) -> Any:
    return _unflatten(structure, iter(leaves))


def _unflatten(structure: Any, leaves) -> Any:
    kind = structure[0]
    if kind == 'none':
        return None
    if kind == 'leaf':
        return next(leaves)
    if kind == 'dict':
        _, cls, keys, children = structure
        return cls(zip(keys, (_unflatten(c, leaves) for c in children)))
    if kind == 'namedtuple':
        return structure[1](*(_unflatten(c, leaves) for c in structure[2]))
    if kind == 'dataclass':
        _, cls, names, children = structure
        return cls(**dict(zip(names, (_unflatten(c, leaves) for c in children))))
    return structure[1](_unflatten(c, leaves) for c in structure[2])


def is_numeric(leaf: Any) -> bool:
    """Leaves that stack into an array: numbers, numpy arrays and array-likes (JAX).

    numpy arrays and scalars have ``__array__``, so this needs no numpy."""
    return isinstance(leaf, numbers.Number) or hasattr(leaf, '__array__')


def signature(leaf: Any) -> Any:
    """What must agree between leaves stacked together."""
    if not is_numeric(leaf):
        return ('object',)
    if isinstance(leaf, numbers.Number) and not hasattr(leaf, '__array__'):
        return ('array', ())  # A Python number: no numpy needed to know its shape.
    import numpy as np  # noqa: PLC0415 (imported on first use: see the module docstring)
    return ('array', np.shape(leaf))


def stack(columns: list[list]) -> list:
    """One stacked leaf per column: numbers and arrays get a new leading axis; other
    leaves (lists, strings, objects) become the list of the callers' values."""
    out = []
    for column in columns:
        if all(is_numeric(leaf) for leaf in column):
            import numpy as np  # noqa: PLC0415 (imported on first use: see the module docstring)
            arrays = [np.asarray(leaf) for leaf in column]
            # One dtype in, the same dtype out (np.stack would make big-endian native).
            same = all(a.dtype == arrays[0].dtype for a in arrays)
            out.append(np.stack(arrays, dtype=arrays[0].dtype if same else None))
        else:  # Split back by position like any other leaf.
            out.append(list(column))
    return out


def split(leaves: list, count: int) -> list[list]:
    """The inverse of ``stack``: ``count`` rows taken along each leaf's leading axis."""
    for leaf in leaves:
        try:
            length = len(leaf)
        except TypeError:
            raise ValueError(
                'a batched function must return values with a leading batch axis; got a '
                f'{type(leaf).__name__} without one ({leaf!r:.80})') from None
        if length < count:
            raise ValueError(f'a batched function returned a leading axis of {length} for a '
                             f'batch of {count}; return one row per caller')
    return [[leaf[i] for leaf in leaves] for i in range(count)]
