"""Actor-learner reinforcement learning: a JAX learner, CPU actors, an evaluator.

    actor ──add_trajectory──▶ learner ◀──get_params── evaluator
      ▲                          │
      └────── get_params ────────┘

With ``replay='reverb'`` the actors insert unrolls into a Reverb queue served
by an ``lp.ReverbNode`` and the learner samples from it:

    actor ──insert──▶ replay ──sample──▶ learner

With ``elastic=True`` actors may join and leave while it trains (see
examples/elastic.py); each actor numbers its unrolls and the learner counts
what it received per actor, so a lost or twice-counted unroll would show.

The actors and the evaluator act with numpy and never import JAX; only the
learner does, so on a machine with a GPU only the learner uses it. The
evaluator ends the program once the greedy policy reaches ``target_return``
or the learner has used ``max_env_steps`` environment steps.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import threading
import time

import numpy as np

import launchpad_py as lp
from examples.actor_learner import network, replay as replay_lib, rollout
from examples.calls import is_stopping, results_or_none


@dataclasses.dataclass(frozen=True)
class Config:
    num_actors: int = 2
    unroll_length: int = 32
    batch_size: int = 16
    learning_rate: float = 3e-3
    refresh_every: int = 1          # unrolls between parameter fetches in an actor
    eval_episodes: int = 10
    eval_interval_s: float = 2.0
    target_return: float = 450.0    # CartPole-v1 caps episodes at 500
    # Most runs reach the target within 150k-300k env steps; a few dip on the way and need
    # ~600k (500k stopped about 1 run in 10 short of it).
    max_env_steps: int = 1_500_000
    seed: int = 0
    checkpoint_every: int = 100     # learner steps between checkpoints (0: only before a stop)


class Learner:
    """Trains on batches of unrolls and serves the newest parameters.

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
        self._stack = learning.stack
        self._queue = (replay_lib.ReverbQueue(replay, self._stop) if replay is not None
                       else replay_lib.InMemoryQueue(self._stop))
        self._lock = threading.Lock()
        self._training = threading.Lock()  # A checkpoint sees parameters and state of one step.
        self._params = (0, self._trainer.numpy_params())
        self._env_steps = 0
        self._train_returns: list[float] = []
        self._unrolls: dict[int, list[int]] = {}  # Actor index -> numbers of its unrolls.
        self._waited_s = self._updating_s = 0.0  # Where the learner's loop spends its time.
        self._checkpoint_path = os.path.join(lp.checkpoint_dir(), 'learner.pkl')
        self._resume()
        print(f'learner: training on {self._trainer.device}', flush=True)

    def _resume(self) -> None:
        if not os.path.exists(self._checkpoint_path):
            return
        with open(self._checkpoint_path, 'rb') as f:
            saved = pickle.load(f)
        self._trainer.restore(saved['trainer'])
        self._params = (saved['step'], self._trainer.numpy_params())
        self._env_steps, self._train_returns = saved['env_steps'], saved['train_returns']
        print(f'learner: resumed from step {saved["step"]} ({saved["env_steps"]} env steps)',
              flush=True)

    def checkpoint(self) -> None:
        """Saves the learner's state (atomically: a crash mid-write keeps the last one)."""
        with self._training, self._lock:
            saved = {'step': self._params[0], 'env_steps': self._env_steps,
                     'train_returns': self._train_returns[-20:],
                     'trainer': self._trainer.state()}
        temporary = self._checkpoint_path + '.tmp'
        with open(temporary, 'wb') as f:
            pickle.dump(saved, f)
        os.replace(temporary, self._checkpoint_path)

    def add_trajectory(self, unroll: dict[str, np.ndarray], source: tuple[int, int] | None = None
                       ) -> None:
        """Actors call this (the in-memory path); blocks while the queue is full.

        ``source``: (actor index, unroll number), counted in ``progress()['unrolls']``.
        """
        if source is not None:
            with self._lock:
                self._unrolls.setdefault(source[0], []).append(source[1])
        self._queue.put(unroll)

    def get_params(self) -> tuple[int, network.Params]:
        """(learner step, parameters as numpy arrays)."""
        with self._lock:
            return self._params

    def progress(self) -> dict:
        """Learner steps, env steps used, recent actor returns, the seconds the loop
        waited for batches (starved) and spent updating (busy), and per actor the unrolls
        received (count, distinct numbers, one past the highest)."""
        with self._lock:
            recent = self._train_returns[-20:]
            # Per actor: unrolls received, distinct numbers, and one past the highest.
            unrolls = {index: [len(seen), len(set(seen)), max(seen) + 1]
                       for index, seen in sorted(self._unrolls.items())}
            return {'step': self._params[0], 'env_steps': self._env_steps,
                    'train_return': float(np.mean(recent)) if recent else None,
                    'waited_s': self._waited_s, 'updating_s': self._updating_s,
                    'unrolls': unrolls}

    def run(self) -> None:
        start = time.monotonic()
        while not self._stop.is_set():
            began = time.perf_counter()
            batch = self._take_batch()
            if batch is None:
                return
            taken = time.perf_counter()
            with self._training:
                metrics = self._trainer.update(self._stack(batch))
                params = self._trainer.numpy_params()
                with self._lock:
                    step = self._params[0] + 1
                    self._params = (step, params)
                    self._env_steps += sum(len(u['actions']) for u in batch)
                    self._train_returns.extend(float(r) for u in batch
                                               for r in u['episode_returns'])
                    self._waited_s += taken - began
                    self._updating_s += time.perf_counter() - taken
            if self._config.checkpoint_every and step % self._config.checkpoint_every == 0:
                self.checkpoint()
            if step % 50 == 0:
                progress, rate = self.progress(), self._env_steps / (time.monotonic() - start)
                recent = progress['train_return']
                print(f'learner: step {step}, {progress["env_steps"]} env steps ({rate:.0f}/s), '
                      f'loss {metrics["loss"]:.3f}, entropy {metrics["entropy"]:.3f}, actor '
                      f'return {"n/a" if recent is None else f"{recent:.1f}"}', flush=True)

    def _take_batch(self):
        try:
            return self._queue.take(self._config.batch_size)
        except Exception:  # Reverb calls fail when its server stops with the program.
            if is_stopping(self._stop):
                return None
            raise


class Actor:
    """Acts in its own CartPole with the newest parameters it fetched; sends unrolls.

    Its calls overlap its acting: the parameters for the next unroll are
    requested when an unroll starts, and an unroll is sent while the next one
    is acted (the previous send must have finished first, so a full queue at
    the learner still slows the actor down). Waiting for each call before
    acting on cost a round trip per call, most of an actor's time once the
    learner's process is busy serving many actors.

    Its index in the group (``lp.get_node_context()``) seeds it, so actors added
    to an elastic group act differently from the first.
    """

    def __init__(self, learner, config: Config, replay=None):
        self._learner = learner
        self._config = config
        self._index = lp.get_node_context().index
        self._sent = 0
        self._stop = lp.stop_event()
        self._sink = replay_lib.ReverbQueue(replay, self._stop) if replay is not None else None
        self._sending: list = []  # The unroll still on its way to the learner, as a future.

    def run(self) -> None:
        unroller = rollout.Unroller(seed=self._config.seed * 1000 + self._index + 1,
                                    length=self._config.unroll_length)
        try:
            params, count = None, 0
            fetching = self._learner.futures.get_params()
            while not self._stop.is_set():
                if fetching is not None:
                    fetched = results_or_none([fetching], self._stop)
                    if fetched is None:
                        return
                    _, params = fetched[0]
                    fetching = None
                count += 1
                if count % self._config.refresh_every == 0:
                    fetching = self._learner.futures.get_params()  # For the next unroll.
                if not self._send(unroller.unroll(params)):
                    return
        finally:
            unroller.close()

    def _send(self, unroll: dict[str, np.ndarray]) -> bool:
        """Sends one unroll once the previous one arrived; False once the program is stopping."""
        if self._sink is None:
            if self._sending and results_or_none(self._sending, self._stop) is None:
                return False
            source = (self._index, self._sent)  # Numbered in the order they are sent.
            self._sending = [self._learner.futures.add_trajectory(unroll, source)]
            self._sent += 1
            return True
        try:
            self._sink.put(unroll)
            return True
        except Exception:  # Reverb fails inserts once its server stops with the program.
            if is_stopping(self._stop):
                return False
            raise


class Evaluator:
    """Scores the greedy policy every few seconds; ends the program when done."""

    def __init__(self, learner, config: Config, result_path: str | None = None):
        self._learner = learner
        self._config = config
        self._result_path = result_path
        self._unrolls: dict = {}

    def run(self) -> None:
        config, start, history = self._config, time.monotonic(), []
        stop = lp.stop_event()
        while not stop.wait(config.eval_interval_s):
            fetched = results_or_none([self._learner.futures.get_params(),
                                       self._learner.futures.progress()], stop)
            if fetched is None:
                return
            (step, params), progress = fetched
            env_steps, self._unrolls = progress['env_steps'], progress['unrolls']
            mean_return = rollout.evaluate(params, config.eval_episodes, seed=10_000)
            elapsed = time.monotonic() - start
            history.append({'seconds': round(elapsed, 1), 'step': step, 'env_steps': env_steps,
                            'mean_return': mean_return})
            print(f'evaluator: {elapsed:5.1f}s, learner step {step}, {env_steps} env steps: '
                  f'mean return {mean_return:.1f} over {config.eval_episodes} episodes',
                  flush=True)
            reached = mean_return >= config.target_return
            if reached or env_steps >= config.max_env_steps:
                why = 'reached the target return' if reached else 'used the step budget'
                print(f'evaluator: {why} ({mean_return:.1f}, target {config.target_return}); '
                      'stopping', flush=True)
                self._write(reached, history)
                lp.stop()
                return

    def _write(self, reached: bool, history: list[dict]) -> None:
        if self._result_path:
            with open(self._result_path, 'w') as f:
                json.dump({'reached_target': reached, 'history': history,
                           'unrolls': self._unrolls}, f)


def make_program(config: Config = Config(), replay: str = 'learner',
                 result_path: str | None = None, elastic: bool = False) -> lp.Program:
    """Builds the program; ``replay`` is ``'learner'`` or ``'reverb'``; ``elastic``: the actor
    group may grow and shrink while it runs."""
    if replay not in ('learner', 'reverb'):
        raise ValueError(f"replay must be 'learner' or 'reverb' (got {replay!r})")
    program = lp.Program('actor_learner')
    replay_handle = None
    if replay == 'reverb':
        missing = replay_lib.reverb_missing_reason()
        if missing:
            raise RuntimeError(f'the reverb variant of actor_learner {missing}')
        replay_handle = program.add_node(lp.ReverbNode(replay_lib.reverb_tables), label='replay')
    learner = program.add_node(
        lp.CourierNode(Learner, config, replay_handle,
                       courier_kwargs={'thread_pool_size': config.num_actors + 8}),
        label='learner')
    with program.group('actor', elastic=elastic):
        for _ in range(config.num_actors):
            program.add_node(lp.PyClassNode(Actor, learner, config, replay_handle))
    program.add_node(lp.PyClassNode(Evaluator, learner, config, result_path), label='evaluator')
    return program


def cpu_only_resources() -> dict[str, lp.PythonProcess]:
    """``local_mp`` resources keeping actors and evaluator off any GPU.

    The learner is left out on purpose: it keeps every GPU the launcher sees and,
    being the only process that sees them, JAX's default allocation (docs/gpus.md).
    """
    cpu = lp.PythonProcess(gpus=[], jax_platforms='cpu')
    return {'actor': cpu, 'evaluator': cpu}
