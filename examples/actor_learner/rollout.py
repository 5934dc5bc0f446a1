"""Acting in CartPole with numpy only: unrolls for the learner, episodes for evaluation.

    unroller = Unroller(seed=1, length=32)
    trajectory = unroller.unroll(params)    # dict of arrays, obs has length + 1 rows
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from examples.actor_learner import network

ENV_ID = 'CartPole-v1'


def make_env():
    return gym.make(ENV_ID)


def env_spec() -> tuple[int, int]:
    """(observation size, number of actions) of the environment."""
    env = make_env()
    try:
        return env.observation_space.shape[0], env.action_space.n
    finally:
        env.close()


class Unroller:
    """Steps one environment across unroll boundaries, resetting at episode ends."""

    def __init__(self, seed: int, length: int):
        self._env = make_env()
        self._rng = np.random.default_rng(seed)
        self._length = length
        self._obs, _ = self._env.reset(seed=seed)
        self._episode_return = 0.0

    def unroll(self, params: network.Params) -> dict[str, np.ndarray]:
        obs, actions, rewards, dones, logits_list, returns = [self._obs], [], [], [], [], []
        for _ in range(self._length):
            action, logits = network.sample_actions(params, self._obs.astype(np.float32), self._rng)
            next_obs, reward, terminated, truncated, _ = self._env.step(int(action))
            self._episode_return += reward
            done = terminated or truncated
            if done:  # A truncated episode is cut like a terminal one: a small, known bias.
                returns.append(self._episode_return)
                self._episode_return = 0.0
                next_obs, _ = self._env.reset()
            actions.append(action)
            rewards.append(reward)
            dones.append(float(done))
            logits_list.append(logits)
            obs.append(next_obs)
            self._obs = next_obs
        return {
            'obs': np.asarray(obs, np.float32), 'actions': np.asarray(actions, np.int32),
            'rewards': np.asarray(rewards, np.float32), 'dones': np.asarray(dones, np.float32),
            'behaviour_logits': np.asarray(logits_list, np.float32),
            'episode_returns': np.asarray(returns, np.float32),
        }

    def close(self) -> None:
        self._env.close()


def evaluate(params: network.Params, episodes: int, seed: int) -> float:
    """Mean return of the greedy policy over ``episodes`` episodes."""
    env = make_env()
    total = 0.0
    try:
        for episode in range(episodes):
            obs, _ = env.reset(seed=seed + episode)
            done = False
            while not done:
                obs, reward, terminated, truncated, _ = env.step(
                    network.greedy_action(params, obs.astype(np.float32)))
                total += reward
                done = terminated or truncated
    finally:
        env.close()
    return total / episodes
