"""The actor-learner example with a Reverb queue between actors and learner.

Runs in the ``[reverb]`` environment; elsewhere it is skipped with the reason.
"""

from __future__ import annotations

import json

import pytest

import launchpad_py as lp
from examples.actor_learner.program import Config, cpu_only_resources, make_program
from examples.actor_learner.replay import reverb_missing_reason

_MISSING = reverb_missing_reason()
pytestmark = [pytest.mark.reverb,
              pytest.mark.skipif(_MISSING is not None, reason=_MISSING or '')]

TARGET = 150.0  # A uniformly random policy averages about 22.


@pytest.mark.timeout(180)
def test_learns_cartpole_through_reverb(tmp_path):
    """Actors insert unrolls into a ReverbNode queue; the learner samples them and learns."""
    path = str(tmp_path / 'result.json')
    config = Config(num_actors=2, target_return=TARGET, max_env_steps=400_000,
                    eval_interval_s=1.0)
    program = make_program(config, replay='reverb', result_path=path)
    lp.launch(program, launch_type='test_mp',
              local_resources=cpu_only_resources()).wait(timeout=150)
    with open(path) as f:
        result = json.load(f)
    assert result['reached_target'], result['history'][-3:]
