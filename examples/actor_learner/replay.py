"""Where actors send unrolls and where the learner takes them from.

Two interchangeable paths, chosen when the program is built:

* ``learner``: actors call ``learner.add_trajectory(unroll)``; the learner keeps
  a bounded in-memory queue (a full queue slows the actors down).
* ``reverb``: actors insert unrolls into a Reverb queue table served by an
  ``lp.ReverbNode``; the learner samples batches from it. Needs dm-reverb
  (``pip install 'launchpad_py[reverb]'``) and ``lp.ReverbNode``.
"""

from __future__ import annotations

import queue
import threading

import numpy as np

TABLE = 'unrolls'
# Order of the arrays in a Reverb item; Reverb stores flat lists of arrays.
FIELDS = ('obs', 'actions', 'rewards', 'dones', 'behaviour_logits', 'episode_returns')
QUEUE_SIZE = 64


def reverb_tables():
    """The ReverbNode's tables: a FIFO queue, so each unroll is learned from once."""
    import reverb
    return [reverb.Table.queue(name=TABLE, max_size=QUEUE_SIZE)]


def reverb_missing_reason() -> str | None:
    """Why the Reverb variant cannot run here, or None when it can."""
    try:
        import reverb  # noqa: F401
    except ImportError:
        return "needs dm-reverb: pip install 'launchpad_py[reverb]'"
    return None


class InMemoryQueue:
    """The learner's own unroll queue; ``put`` gives up when the program stops."""

    def __init__(self, stop: threading.Event, maxsize: int = QUEUE_SIZE):
        self._queue: queue.Queue = queue.Queue(maxsize)
        self._stop = stop

    def put(self, unroll: dict[str, np.ndarray]) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(unroll, timeout=0.5)
                return
            except queue.Full:
                continue

    def take(self, count: int) -> list[dict[str, np.ndarray]] | None:
        """``count`` unrolls, or None if the program stops first."""
        batch = []
        while len(batch) < count:
            try:
                batch.append(self._queue.get(timeout=0.5))
            except queue.Empty:
                if self._stop.is_set():
                    return None
        return batch


class ReverbQueue:
    """The same two operations on a Reverb table (``client`` is a reverb.Client).

    Reverb's sampler waits for items with no deadline, even after its server
    has gone, so ``take`` samples only once the table holds a full batch and
    otherwise checks for a stop every 50 ms.
    """

    def __init__(self, client, stop: threading.Event):
        self._client = client
        self._stop = stop

    def put(self, unroll: dict[str, np.ndarray]) -> None:
        self._client.insert([unroll[name] for name in FIELDS], priorities={TABLE: 1.0})

    def take(self, count: int) -> list[dict[str, np.ndarray]] | None:
        """``count`` unrolls (this learner is the queue's only reader), or None on stop."""
        while self._client.server_info(timeout=5)[TABLE].current_size < count:
            if self._stop.wait(0.05):
                return None
        samples = self._client.sample(TABLE, num_samples=count)
        # An item written with insert() is one timestep holding the whole unroll.
        return [dict(zip(FIELDS, sample[0].data)) for sample in samples]
