"""Where actors send unrolls and where the learner takes them from.

Two interchangeable paths, chosen when the program is built:

* ``learner``: actors call ``learner.add_trajectory(unroll)``; the learner keeps
  a bounded in-memory queue (a full queue slows the actors down).
* ``reverb``: actors insert unrolls into a Reverb queue table served by an
  ``lp.ReverbNode``; the learner samples batches from it. Needs dm-reverb
  (``pip install 'launchpad_py[reverb]'``) and ``lp.ReverbNode``.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading

import numpy as np

TABLE = 'unrolls'
# Order of the arrays in a Reverb item; Reverb stores flat lists of arrays.
FIELDS = ('obs', 'actions', 'rewards', 'dones', 'behaviour_logits', 'episode_returns')


def batch_sizes(batch_size: int, growth: int) -> tuple[int, ...]:
    """The sizes a learner takes: ``batch_size`` times 1, 2, 4, ... up to ``growth``.

    Few sizes, so the learner's jitted step compiles a few times, not once per size.

        >>> batch_sizes(16, 8)
        (16, 32, 64, 128)
    """
    if batch_size < 1 or growth < 1:
        raise ValueError(f'batch_size and batch_growth must be at least 1 '
                         f'(got {batch_size} and {growth})')
    sizes = [batch_size]
    while sizes[-1] * 2 <= batch_size * growth:
        sizes.append(sizes[-1] * 2)
    return tuple(sizes)


def _largest_fitting(sizes: tuple[int, ...], available: int) -> int:
    return max(size for size in sizes if size <= available)


def reverb_tables(max_size: int):
    """The ReverbNode's tables: a FIFO queue, so each unroll is learned from once."""
    import reverb
    return [reverb.Table.queue(name=TABLE, max_size=max_size)]


def reverb_missing_reason() -> str | None:
    """Why the Reverb variant cannot run here, or None when it can."""
    try:
        import reverb  # noqa: F401
    except ImportError:
        return "needs dm-reverb: pip install 'launchpad_py[reverb]'"
    return None


class InMemoryQueue:
    """The learner's own unroll queue; ``put`` gives up when the program stops.

    ``take`` returns as many of the waiting unrolls as one allowed batch size
    holds, so the learner's consumption grows with the actors' supply: each
    update costs the learner's host about the same whatever its batch size.
    """

    def __init__(self, stop: threading.Event, maxsize: int):
        self._items: collections.deque = collections.deque()
        self._maxsize = maxsize
        self._stop = stop
        lock = threading.Lock()
        self._room, self._ready = threading.Condition(lock), threading.Condition(lock)

    def put(self, unroll: dict[str, np.ndarray]) -> None:
        with self._room:
            # The timeout only notices a stop; a take wakes a waiting put.
            while len(self._items) >= self._maxsize:
                if self._stop.is_set():
                    return
                self._room.wait(0.5)
            self._items.append(unroll)
            self._ready.notify()

    def take(self, sizes: tuple[int, ...]) -> list[dict[str, np.ndarray]] | None:
        """The oldest unrolls, as many as the largest of ``sizes`` that are waiting
        (at least ``sizes[0]``: it waits for them), or None if the program stops first."""
        with self._ready:
            while len(self._items) < sizes[0]:
                if self._stop.is_set():
                    return None
                self._ready.wait(0.5)
            count = _largest_fitting(sizes, len(self._items))
            batch = [self._items.popleft() for _ in range(count)]
            self._room.notify_all()
            return batch


class ReverbQueue:
    """The same two operations on a Reverb table (``client`` is a reverb.Client).

    Reverb's sampler waits for items with no deadline, even after its server
    has gone, so ``take`` samples only once the table holds a full batch and
    otherwise checks for a stop every 50 ms; the sample itself runs in a thread
    of its own, which the learner leaves behind if the program stops meanwhile.
    """

    def __init__(self, client, stop: threading.Event):
        self._client = client
        self._stop = stop

    def put(self, unroll: dict[str, np.ndarray]) -> None:
        """Inserts ``unroll`` once the table has room; gives up when the program stops.

        Reverb's insert into a full queue waits with no deadline, stop or not (an actor
        stuck there was killed at the end of the stop's grace period), so ``put`` waits for
        room itself, checking for a stop every 50 ms. (Several actors may still race for
        the last slot; the loser's insert then waits for the learner's next take.)
        """
        while True:
            info = self._client.server_info(timeout=5)[TABLE]
            if info.current_size < info.max_size:
                break
            if self._stop.wait(0.05):
                return
        self._client.insert([unroll[name] for name in FIELDS], priorities={TABLE: 1.0})

    def take(self, sizes: tuple[int, ...]) -> list[dict[str, np.ndarray]] | None:
        """As ``InMemoryQueue.take`` (this learner is the queue's only reader), or None on stop."""
        while (waiting := self._client.server_info(timeout=5)[TABLE].current_size) < sizes[0]:
            if self._stop.wait(0.05):
                return None
        return self._sample(_largest_fitting(sizes, waiting))

    def _sample(self, count: int) -> list[dict[str, np.ndarray]] | None:
        """``count`` unrolls, or None if the program stops first.

        The Reverb node stops with the program, and a sample under way then waits for its
        server for ever (the learner was killed at the end of the stop's grace period): the
        sample runs in a daemon thread, and this waits for it checking for a stop every 50 ms.
        """
        sampled: concurrent.futures.Future = concurrent.futures.Future()

        def sample() -> None:
            try:
                samples = self._client.sample(TABLE, num_samples=count)
                # An item written with insert() is one timestep holding the whole unroll.
                sampled.set_result([dict(zip(FIELDS, sample[0].data)) for sample in samples])
            except BaseException as exc:  # The learner's thread raises it.
                sampled.set_exception(exc)

        threading.Thread(target=sample, name='reverb-sample', daemon=True).start()
        while True:
            try:
                return sampled.result(timeout=0.05)
            except concurrent.futures.TimeoutError:
                if self._stop.is_set():
                    return None
