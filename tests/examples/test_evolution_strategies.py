"""The evolution-strategies example improves its fitness past a threshold and stops itself."""

from __future__ import annotations

import json

import pytest

import launchpad_py as lp
from examples.elastic import resize_while_running
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


@pytest.mark.parametrize('launch_type', ['test_mp', 'test_mt'])
def test_evaluators_joining_and_leaving_change_nothing_in_the_search(tmp_path, launch_type):
    """The evaluator group grows and shrinks while the search runs: every generation
    is evaluated whole, and the search is exactly that of a fixed group (nothing lost or
    counted twice)."""
    results = {}
    for elastic in (False, True):
        path = str(tmp_path / f'{elastic}.json')
        program = make_program(2, seed=3, max_generations=100, result_path=path,
                               elastic=elastic, simulation_s=0.02 if elastic else 0.0)
        controller = lp.launch(program, launch_type=launch_type)
        if elastic:
            resize_while_running(controller, 'evaluator', [4, 1, 3], interval_s=0.3)
        controller.wait(timeout=90)
        with open(path) as f:
            results[elastic] = json.load(f)['history']
    sizes = [h['evaluators'] for h in results[True]]
    assert len(set(sizes)) >= 2, sizes
    assert all(h['evaluated'] == 100 for h in results[True])
    keys = ('best', 'fitness_of_mean', 'sigma')
    assert [[h[k] for k in keys] for h in results[True]] == [
        [h[k] for k in keys] for h in results[False]]
