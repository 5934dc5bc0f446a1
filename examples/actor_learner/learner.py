"""The learner node: trains on batches of unrolls and serves the newest parameters.

Only this node imports JAX (through ``learning``), so on a machine with a GPU
only the learner uses it. Its process also serves every actor's calls, with
one GIL for those and its training loop alike; what it does per update and per
call is kept small for that reason (see ``Learner``).
"""

from __future__ import annotations

import collections
import os
import pickle
import threading
import time
from typing import TYPE_CHECKING

import numpy as np

import launchpad_py as lp
from examples.actor_learner import network, replay as replay_lib, rollout
from examples.calls import is_stopping

if TYPE_CHECKING:  # program.py imports this module.
    from examples.actor_learner.program import Config


class Learner:
    """Trains on batches of unrolls and serves the newest parameters.

    Each update takes every unroll waiting, from ``batch_size`` up to
    ``batch_size × batch_growth`` in powers of two (a few shapes for JAX to
    compile): with few actors it learns from small batches as they come, and
    with many its consumption grows with their supply, since an update costs
    the host about the same at any of these sizes. Parameters are copied to
    the host once per step: by default by the training loop itself, once the
    step is done (the copy starts in the background when the step starts), so
    the server threads that answer actors never call JAX; on a GPU their
    blocking copies had stalled the loop's own dispatch (docs/performance.md).

    It saves its parameters, optimizer state and counters in ``lp.checkpoint_dir()``
    every ``checkpoint_every`` steps and before a planned stop (``checkpoint()``), and
    starts from the last save: restarted after a crash (``lp.Restart``), or relaunched
    with the same ``LAUNCHPAD_PY_CHECKPOINT_DIR``, it goes on where it was.
    """

    def __init__(self, config: Config, replay=None):
        from examples.actor_learner import learning  # JAX stays out of the other nodes.
        self._config = config
        self._stop = lp.stop_event()
        self._trainer = learning.Trainer(network.init(config.seed, *rollout.env_spec()),
                                         config.learning_rate)
        self._stack, self._to_numpy = learning.stack, learning.to_numpy
        self._start_host_copy = learning.start_host_copy
        self._sizes = replay_lib.batch_sizes(config.batch_size, config.batch_growth)
        self._queue = (replay_lib.ReverbQueue(replay, self._stop) if replay is not None
                       else replay_lib.InMemoryQueue(self._stop, config.queue_size))
        self._lock = threading.Lock()
        self._training = threading.Lock()  # A checkpoint sees parameters and state of one step.
        self._publishing = threading.Lock()
        self._latest = (0, self._trainer.params)  # (step, device parameters), set as one.
        self._published: tuple = (None, None)  # (step, host parameters), made on request.
        self._unpublished = None  # publish='learner': (step, device parameters) being copied.
        self._env_steps = 0
        self._train_returns: collections.deque = collections.deque(maxlen=20)
        self._unrolls: dict[int, ReceivedUnrolls] = {}  # Actor index -> its unrolls received.
        self._waited_s = self._updating_s = 0.0  # Where the learner's loop spends its time.
        self._stacking_s = 0.0  # Of the updating time: stacking the batch on the host.
        self._to_host = (0, 0.0)  # Parameter copies to the host for actors: count, seconds.
        self._checkpoint_path = os.path.join(lp.checkpoint_dir(), 'learner.pkl')
        self._resume()
        if config.publish == 'learner':
            self._published = (self._latest[0], self._to_numpy(self._latest[1]))
        print(f'learner: training on {self._trainer.device}', flush=True)

    def _resume(self) -> None:
        if not os.path.exists(self._checkpoint_path):
            return
        with open(self._checkpoint_path, 'rb') as f:
            saved = pickle.load(f)
        self._trainer.restore(saved['trainer'])
        self._latest = (saved['step'], self._trainer.params)
        self._env_steps = saved['env_steps']
        self._train_returns.extend(saved['train_returns'])
        print(f'learner: resumed from step {saved["step"]} ({saved["env_steps"]} env steps)',
              flush=True)

    def checkpoint(self) -> None:
        """Saves the learner's state (atomically: a crash mid-write keeps the last one)."""
        with self._training, self._lock:
            saved = {'step': self._latest[0], 'env_steps': self._env_steps,
                     'train_returns': list(self._train_returns),
                     'trainer': self._trainer.state()}
        temporary = self._checkpoint_path + '.tmp'
        with open(temporary, 'wb') as f:
            pickle.dump(saved, f)
        os.replace(temporary, self._checkpoint_path)

    def add_trajectory(self, unroll: dict[str, np.ndarray], source: tuple[int, int] | None = None,
                       newer_than: int | None = None) -> tuple[int, network.Params] | None:
        """Actors call this (the in-memory path); blocks while the queue is full.

        ``source``: (actor index, unroll number), counted in ``progress()['unrolls']``.
        ``newer_than``: the step of the caller's parameters; the reply is then
        ``get_params(newer_than)``, which saves the actor a call per unroll.
        """
        return self.add_trajectories([unroll], source, newer_than)

    def add_trajectories(self, unrolls: list[dict[str, np.ndarray]],
                         source: tuple[int, int] | None = None,
                         newer_than: int | None = None) -> tuple[int, network.Params] | None:
        """``add_trajectory`` for several unrolls in one call (``Config.unrolls_per_call``);
        ``source`` numbers the first, the others follow it."""
        if source is not None:
            with self._lock:
                received = self._unrolls.setdefault(source[0], ReceivedUnrolls())
                for offset in range(len(unrolls)):
                    received.add(source[1] + offset)
        for unroll in unrolls:
            self._queue.put(unroll)
        return None if newer_than is None else self.get_params(newer_than)

    def get_params(self, newer_than: int | None = None) -> tuple[int, network.Params] | None:
        """(learner step, parameters as numpy arrays); None when the learner's step is
        not past ``newer_than`` (the caller has these parameters already)."""
        if self._config.publish == 'learner':  # Made by the training loop: no JAX here.
            published = self._published
            return None if newer_than is not None and published[0] <= newer_than else published
        if newer_than is not None and self._latest[0] <= newer_than:
            return None
        with self._publishing:  # One host copy per step, made by whichever call asks first.
            step, params = self._latest
            if self._published[0] != step:
                self._publish(step, params)
            return self._published

    def _publish(self, step: int, params: network.Params) -> None:
        """Makes the host copy that ``get_params`` hands out, and counts it."""
        began = time.perf_counter()
        self._published = (step, self._to_numpy(params))
        count, seconds = self._to_host
        self._to_host = (count + 1, seconds + time.perf_counter() - began)

    def _publish_done_step(self) -> None:
        """With ``publish='learner'``: update() has just waited for the step before the one
        it started, so that step's parameters, whose copy to the host began when it was
        started, are host arrays now; the new step's copy starts in the background."""
        done, self._unpublished = self._unpublished, self._latest
        if done is not None:
            self._publish(*done)
        self._start_host_copy(self._unpublished[1])

    def progress(self) -> dict:
        """Learner steps, env steps used, recent actor returns, the seconds the loop
        waited for batches (starved) and spent updating (busy), and per actor the unrolls
        received (count, distinct numbers, one past the highest)."""
        with self._lock:
            recent = list(self._train_returns)
            return {'step': self._latest[0], 'env_steps': self._env_steps,
                    'train_return': float(np.mean(recent)) if recent else None,
                    'waited_s': self._waited_s, 'updating_s': self._updating_s,
                    # Parts of updating_s: a learner slower than its device shows where.
                    'update_phases_s': {'stack': self._stacking_s, **self._trainer.seconds},
                    'params_to_host': self._to_host,
                    'unrolls': {index: received.summary()
                                for index, received in sorted(self._unrolls.items())}}

    def run(self) -> None:
        start, compiled = time.monotonic(), False
        while not self._stop.is_set():
            began = time.perf_counter()
            batch = self._take_batch()
            if batch is None:
                return
            taken = time.perf_counter()
            stacked = self._stack(batch)
            self._stacking_s += time.perf_counter() - taken
            if not compiled:  # Every batch size, before this run's first step.
                for size in self._sizes:
                    if self._stop.is_set():
                        return
                    self._trainer.compile(stacked, size)
                compiled = True
            with self._training:
                metrics = self._trainer.update(stacked)
                with self._lock:
                    step = self._latest[0] + 1
                    self._latest = (step, self._trainer.params)
                    self._env_steps += sum(len(u['actions']) for u in batch)
                    self._train_returns.extend(float(r) for u in batch for r in u['episode_returns'])
                    self._waited_s += taken - began
                    self._updating_s += time.perf_counter() - taken
                if self._config.publish == 'learner':
                    self._publish_done_step()
            if self._config.checkpoint_every and step % self._config.checkpoint_every == 0:
                self.checkpoint()
            if step % 50 == 0:
                progress, rate = self.progress(), self._env_steps / (time.monotonic() - start)
                recent = progress['train_return']
                # float() waits for the device: only here, not every update.
                print(f'learner: step {step} ({len(batch)} unrolls), {progress["env_steps"]} env '
                      f'steps ({rate:.0f}/s), loss {float(metrics["loss"]):.3f}, entropy '
                      f'{float(metrics["entropy"]):.3f}, actor return '
                      f'{"n/a" if recent is None else f"{recent:.1f}"}', flush=True)

    def _take_batch(self):
        try:
            return self._queue.take(self._sizes)
        except Exception:  # Reverb calls fail when its server stops with the program.
            if is_stopping(self._stop):
                return None
            raise


class ReceivedUnrolls:
    """One actor's unroll numbers as they arrive: how many, how many distinct, one past
    the highest. Numbers below ``contiguous`` have all arrived; only later ones are kept."""

    def __init__(self):
        self._count = self._contiguous = self._end = 0
        self._early: set[int] = set()

    def add(self, number: int) -> None:
        self._count += 1
        self._end = max(self._end, number + 1)
        if number >= self._contiguous:
            self._early.add(number)
        while self._contiguous in self._early:
            self._early.remove(self._contiguous)
            self._contiguous += 1

    def summary(self) -> list[int]:
        return [self._count, self._contiguous + len(self._early), self._end]
