"""Actor-learner reinforcement learning: a JAX learner, CPU actors, an evaluator.

    actor ──add_trajectory──▶ learner ◀──get_params── evaluator
      ▲                          │
      └── newer parameters ──────┘   (the reply to add_trajectory, when the learner moved on)

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
import functools
import json
import time

import numpy as np

import launchpad_py as lp
from examples.actor_learner import replay as replay_lib, rollout
from examples.actor_learner.learner import Learner
from examples.calls import is_stopping, results_or_none


@dataclasses.dataclass(frozen=True)
class Config:
    num_actors: int = 2
    unroll_length: int = 32
    batch_size: int = 16            # the fewest unrolls per update
    batch_growth: int = 8           # with more waiting, up to batch_size × this (powers of two)
    learning_rate: float = 3e-3
    refresh_every: int = 1          # unrolls between parameter requests in an actor
    # Unrolls an actor sends in one call: the learner's process serves every call with the
    # GIL its training loop needs, so fewer, larger calls leave it more of it.
    unrolls_per_call: int = 1
    # Who copies new parameters to the host: 'learner' (the training loop, once the step is
    # done: no server thread calls JAX, which on a GPU stalled the loop's dispatch) or
    # 'request' (the first actor call that asks; actors get parameters one step newer).
    publish: str = 'learner'
    eval_episodes: int = 10
    eval_interval_s: float = 2.0
    target_return: float = 450.0    # CartPole-v1 caps episodes at 500
    # Most runs reach the target within 150k-300k env steps; a few dip on the way and need
    # ~600k (500k stopped about 1 run in 10 short of it).
    max_env_steps: int = 1_500_000
    seed: int = 0
    checkpoint_every: int = 100     # learner steps between checkpoints (0: only before a stop)

    def __post_init__(self):
        if self.publish not in ('request', 'learner'):
            raise ValueError(f"Config.publish must be 'request' or 'learner' (got {self.publish!r})")
        if self.unrolls_per_call < 1:
            raise ValueError(f'Config.unrolls_per_call must be at least 1 '
                             f'(got {self.unrolls_per_call})')

    @property
    def queue_size(self) -> int:
        """Two of the largest batches: actors fill one while the learner takes the other."""
        return 2 * replay_lib.batch_sizes(self.batch_size, self.batch_growth)[-1]


_STOPPING = object()


class Actor:
    """Acts in its own CartPole with the newest parameters it has; sends unrolls.

    One call to the learner per unroll (or per ``unrolls_per_call`` unrolls): the
    call that sends them also asks for the learner's parameters if they moved past
    the actor's (``newer_than``), and its reply arrives while the next unroll is
    acted; the one after that uses it. The send must have finished before the next
    one starts, so a full queue at the learner still slows the actor down. Waiting
    for each call before acting on cost a round trip per call, and a second call per unroll
    just for parameters doubled the calls that the learner's process, with its
    one GIL, serves for every actor. With Reverb the unroll goes to Reverb and
    the call to the learner only asks for parameters.

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
        self._sending = None  # The last call to the learner, as a future.
        self._unsent: list[dict[str, np.ndarray]] = []  # Unrolls waiting for a full call.

    def run(self) -> None:
        unroller = rollout.Unroller(seed=self._config.seed * 1000 + self._index + 1,
                                    length=self._config.unroll_length)
        try:
            fetched = results_or_none([self._learner.futures.get_params()], self._stop)
            if fetched is None:
                return
            step, params = fetched[0]
            while not self._stop.is_set():
                self._unsent.append(unroller.unroll(params))
                if len(self._unsent) < self._config.unrolls_per_call:
                    continue
                unrolls, self._unsent = self._unsent, []
                reply = self._send(unrolls, step)
                if reply is _STOPPING:
                    return
                if reply is not None:
                    step, params = reply
        finally:
            unroller.close()

    def _send(self, unrolls: list[dict[str, np.ndarray]], step: int):
        """Sends ``unrolls`` once the previous send finished; returns that send's reply
        (newer ``(step, params)`` or None), or ``_STOPPING`` once the program is stopping."""
        reply = None
        if self._sending is not None:
            finished = results_or_none([self._sending], self._stop)
            if finished is None:
                return _STOPPING
            reply = finished[0]
        known = step if reply is None else reply[0]
        newer_than = known if self._sent % self._config.refresh_every == 0 else None
        if self._sink is None:
            source = (self._index, self._sent)  # Numbered in the order they are sent.
            self._sending = self._learner.futures.add_trajectories(unrolls, source, newer_than)
        else:
            try:
                for unroll in unrolls:
                    self._sink.put(unroll)
            except Exception:  # Reverb fails inserts once its server stops with the program.
                if is_stopping(self._stop):
                    return _STOPPING
                raise
            self._sending = (None if newer_than is None
                             else self._learner.futures.get_params(newer_than))
        self._sent += len(unrolls)
        return reply


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
        tables = functools.partial(replay_lib.reverb_tables, config.queue_size)
        replay_handle = program.add_node(lp.ReverbNode(tables), label='replay')
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
