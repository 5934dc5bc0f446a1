"""The actor-learner example learns CartPole and ends itself."""

from __future__ import annotations

import json

import pytest

import launchpad_py as lp
from examples.actor_learner.program import Config, cpu_only_resources, make_program

# A uniformly random policy averages about 22 in CartPole-v1; 150 is far from chance.
TARGET = 150.0


def _run(tmp_path, launch_type: str, config: Config, timeout: float) -> dict:
    path = str(tmp_path / 'result.json')
    resources = cpu_only_resources() if launch_type.endswith('_mp') else None
    controller = lp.launch(make_program(config, result_path=path), launch_type=launch_type,
                           local_resources=resources)
    controller.wait(timeout=timeout)
    with open(path) as f:
        return json.load(f)


@pytest.mark.timeout(180)
def test_learns_cartpole_as_processes(tmp_path):
    """Two actor processes and a JAX learner reach a greedy mean return of 150 (random: ~22)."""
    config = Config(num_actors=2, target_return=TARGET, max_env_steps=400_000, seed=0,
                    eval_interval_s=1.0)
    result = _run(tmp_path, 'test_mp', config, timeout=150)
    assert result['reached_target'], result['history'][-3:]
    assert result['history'][-1]['mean_return'] >= TARGET


def test_stops_at_step_budget_as_threads(tmp_path):
    """Under test_mt the evaluator ends the program once the env-step budget is used."""
    config = Config(num_actors=1, batch_size=4, target_return=1e9, max_env_steps=1000,
                    eval_interval_s=0.5, eval_episodes=2)
    result = _run(tmp_path, 'test_mt', config, timeout=90)
    assert not result['reached_target']
    assert result['history'][-1]['env_steps'] >= 1000
