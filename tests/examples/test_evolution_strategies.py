"""The evolution-strategies example improves its fitness past a threshold and stops itself."""

from __future__ import annotations

import json

import pytest

import launchpad_py as lp
from examples.evolution_strategies.program import make_program


@pytest.mark.parametrize('launch_type, num_evaluators', [('test_mt', 3), ('test_mp', 2)])
def test_converges_on_rastrigin(tmp_path, launch_type, num_evaluators):
    """From fitness about -90, the mean reaches better than -5 and converges within 300 generations."""
    path = str(tmp_path / 'result.json')
    program = make_program(num_evaluators, seed=0, max_generations=300, result_path=path)
    lp.launch(program, launch_type=launch_type).wait(timeout=60)
    with open(path) as f:
        result = json.load(f)
    assert result['history'][0]['fitness_of_mean'] < -50
    assert result['converged'], result['history'][-1]
    assert result['history'][-1]['fitness_of_mean'] > -5
