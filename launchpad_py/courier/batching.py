"""``batched_handler``: many concurrent calls become one call on stacked arguments.

    class Policy:
        @lp.batched_handler(batch_size=8, timeout=0.05)
        def act(self, observation):           # observation: [batch, ...]
            return self.network(observation)  # leading axis split back per caller

Each caller waits for its own row of the result. Array and number arguments
(also inside dicts, tuples, namedtuples and dataclasses) are stacked on a new
leading axis; a list, string or other object arrives as the list of the
callers' values (as in the original Launchpad: ``compute([x, x + 1])`` from
three callers gives ``compute`` a list of three lists). Results are split
back by the same rules: arrays and lists by their leading position. A batch runs as
soon as ``batch_size`` calls wait, or when the oldest has waited ``timeout``
(``None``: only full batches). ``pad_batch`` repeats the last call's
arguments to fill a short batch; ``max_parallelism`` bounds how many batches
run at once.

No extra thread is used: the caller that completes a batch (or whose wait
timed out) runs it, so a server needs ``thread_pool_size >= batch_size`` for
full batches without a timeout.
"""

from __future__ import annotations

import copy
import datetime
import functools
import threading
from typing import Any, Callable

from launchpad_py.courier import pytree

DEFAULT_TIMEOUT = datetime.timedelta(milliseconds=200)


def batched_handler(batch_size: int, max_parallelism: int = 1,
                    timeout: float | datetime.timedelta | None = DEFAULT_TIMEOUT,
                    pad_batch: bool = False) -> Callable:
    """Decorates a function or method so concurrent calls run as one batch."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f'batch_size must be a positive int (got {batch_size!r})')
    if not isinstance(max_parallelism, int) or max_parallelism < 1:
        raise ValueError(f'max_parallelism must be a positive int (got {max_parallelism!r})')
    seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else timeout
    if seconds is not None and (not isinstance(seconds, (int, float)) or seconds < 0):
        raise ValueError(f'timeout must be None, a non-negative number of seconds or a '
                         f'timedelta (got {timeout!r})')
    config = _Config(batch_size, seconds, pad_batch, max_parallelism)
    return lambda function: BatchedFunction(function, config)


class _Config:
    __slots__ = ('batch_size', 'timeout', 'pad_batch', 'max_parallelism')

    def __init__(self, batch_size, timeout, pad_batch, max_parallelism):
        self.batch_size, self.timeout = batch_size, timeout
        self.pad_batch, self.max_parallelism = pad_batch, max_parallelism


class BatchedFunction:
    """The decorated function; as a method, each instance batches on its own."""

    def __init__(self, function: Callable, config: _Config):
        self._function = function
        self._config = config
        self._batcher: _Batcher | None = None
        self._lock = threading.Lock()
        functools.update_wrapper(self, function)

    def __call__(self, *args, **kwargs) -> Any:
        with self._lock:
            if self._batcher is None:
                self._batcher = _Batcher(self._function, self._config)
        return self._batcher.call(args, kwargs)

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        key = f'_lp_batched_{self._function.__name__}'
        with self._lock:
            bound = instance.__dict__.get(key)
            if bound is None:
                bound = BatchedFunction(self._function.__get__(instance, owner), self._config)
                instance.__dict__[key] = bound
        return bound

    def __getstate__(self) -> dict:
        return {'function': self._function, 'config': self._config}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state['function'], state['config'])


class _Slot:
    __slots__ = ('args', 'done', 'value', 'error')

    def __init__(self, args):
        self.args = args
        self.done = threading.Event()
        self.value = self.error = None

    def finish(self, value=None, error: BaseException | None = None) -> None:
        self.value, self.error = value, error
        self.done.set()


class _Batcher:
    def __init__(self, function: Callable, config: _Config):
        self._function = function
        self._config = config
        self._pending: list[_Slot] = []
        self._cond = threading.Condition()
        self._parallel = threading.BoundedSemaphore(config.max_parallelism)

    def call(self, args: tuple, kwargs: dict) -> Any:
        slot = _Slot((args, kwargs))
        batch = self._enqueue(slot)
        if batch:
            self._run(batch)
        slot.done.wait()
        if slot.error is not None:
            raise _own_copy(slot.error)
        return slot.value

    def _enqueue(self, slot: _Slot) -> list[_Slot]:
        """The batch this caller must run, if any.

        The oldest waiting caller keeps the timer; the caller that fills a
        batch takes it, so fewer than ``batch_size`` calls ever wait here.
        """
        size = self._config.batch_size
        with self._cond:
            self._pending.append(slot)
            if len(self._pending) >= size:
                batch, self._pending = self._pending[:size], self._pending[size:]
                self._cond.notify_all()
                return batch
            if self._pending[0] is not slot:
                return []
            self._cond.wait_for(lambda: slot not in self._pending, self._config.timeout)
            if slot not in self._pending:
                return []
            batch, self._pending = self._pending, []
            return batch

    def _run(self, batch: list[_Slot]) -> None:
        callers = _compatible(batch)
        rows = [slot.args for slot in callers]
        if self._config.pad_batch:
            rows += [rows[-1]] * (self._config.batch_size - len(rows))
        leaves = [pytree.flatten(row)[0] for row in rows]
        structure = pytree.flatten(rows[0])[1]
        try:
            args, kwargs = pytree.unflatten(structure, pytree.stack(list(map(list, zip(*leaves)))))
            with self._parallel:
                result = self._function(*args, **kwargs)
            result_leaves, result_structure = pytree.flatten(result)
            for slot, row in zip(callers, pytree.split(result_leaves, len(callers))):
                slot.finish(pytree.unflatten(result_structure, row))
        except Exception as exc:  # Every caller of the batch learns why it failed.
            for slot in callers:
                if not slot.done.is_set():
                    slot.finish(error=exc)


def _own_copy(error: BaseException) -> BaseException:
    """A copy per caller: raising one object in many threads would tangle its traceback."""
    try:
        clone = copy.copy(error)
    except Exception:
        return error
    clone.__traceback__ = error.__traceback__
    clone.__cause__, clone.__context__ = error.__cause__, error.__context__
    return clone


def _compatible(batch: list[_Slot]) -> list[_Slot]:
    """The calls that stack with the first one; the others fail on their own."""
    def key(slot):
        leaves, structure = pytree.flatten(slot.args)
        return structure, [pytree.signature(leaf) for leaf in leaves]

    first = key(batch[0])
    callers = []
    for slot in batch:
        if key(slot) == first:
            callers.append(slot)
        else:
            slot.finish(error=TypeError(
                'batched call arguments must have the same structure and array shapes as the '
                f'rest of the batch; got {_describe(slot.args)}, batch has '
                f'{_describe(batch[0].args)}'))
    return callers


def _describe(args: tuple) -> str:
    leaves, _ = pytree.flatten(args)
    shapes = [pytree.signature(leaf)[-1] if pytree.is_numeric(leaf) else type(leaf).__name__
              for leaf in leaves]
    return f'leaves {shapes}'
