"""Evolution strategies: an evolver fans candidates out to evaluator nodes.

    evolver ──evaluate(candidates)──▶ evaluator × N

Each generation the evolver samples a population from its search
distribution (SNES), splits it evenly over the evaluators with
``evaluator.futures.evaluate(...)``, and updates the distribution from the
returned fitnesses (negative 10-D Rastrigin: higher is better, 0 is the
optimum). It stops once the search distribution has shrunk below
``sigma_tolerance`` or after ``max_generations``, writes a summary to
``result_path`` (JSON) if given, and ends the program.
"""

from __future__ import annotations

import json
import time

import numpy as np

import launchpad_py as lp
from examples.calls import results_or_none
from examples.evolution_strategies.strategy import SNES, rastrigin


class Evaluator:
    """Scores candidates; the objective is cheap here, a simulation in real use."""

    def evaluate(self, candidates: np.ndarray) -> np.ndarray:
        return -rastrigin(np.asarray(candidates))


class Evolver:
    def __init__(self, evaluators: list, dim: int = 10, population: int = 100, seed: int = 0,
                 max_generations: int = 500, sigma_tolerance: float = 1e-3,
                 result_path: str | None = None):
        self._evaluators = evaluators
        self._strategy = SNES(dim, seed, population)
        self._max_generations = max_generations
        self._sigma_tolerance = sigma_tolerance
        self._result_path = result_path

    def run(self) -> None:
        history, start = [], time.monotonic()
        for generation in range(1, self._max_generations + 1):
            fitness = self._evaluate(self._strategy.ask())
            if fitness is None:
                return  # The program is stopping.
            self._strategy.tell(fitness)
            fitness_of_mean = float(-rastrigin(self._strategy.mean))
            history.append({'generation': generation, 'best': float(fitness.max()),
                            'fitness_of_mean': fitness_of_mean,
                            'sigma': float(self._strategy.sigma.max())})
            if generation % 10 == 0 or self._converged():
                print(f'evolver: generation {generation}: best {fitness.max():8.3f}, '
                      f'mean of population {fitness.mean():8.3f}, fitness of the mean '
                      f'{fitness_of_mean:8.3f}, sigma {self._strategy.sigma.max():.4f}', flush=True)
            if self._converged():
                break
        self._finish(history, time.monotonic() - start)

    def _evaluate(self, population: np.ndarray) -> np.ndarray | None:
        chunks = np.array_split(population, len(self._evaluators))
        futures = [e.futures.evaluate(c) for e, c in zip(self._evaluators, chunks)]
        results = results_or_none(futures, lp.stop_event())
        return None if results is None else np.concatenate(results)

    def _converged(self) -> bool:
        return float(self._strategy.sigma.max()) < self._sigma_tolerance

    def _finish(self, history: list[dict], seconds: float) -> None:
        last = history[-1]
        why = 'converged' if self._converged() else 'reached the generation limit'
        print(f'evolver: {why} after {last["generation"]} generations in {seconds:.1f}s; fitness '
              f'of the mean {last["fitness_of_mean"]:.4f} (optimum 0)', flush=True)
        if self._result_path:
            with open(self._result_path, 'w') as f:
                json.dump({'converged': self._converged(), 'history': history,
                           'mean': self._strategy.mean.tolist()}, f)
        lp.stop()


def make_program(num_evaluators: int = 4, *, dim: int = 10, population: int = 100, seed: int = 0,
                 max_generations: int = 500, result_path: str | None = None) -> lp.Program:
    program = lp.Program('evolution_strategies')
    with program.group('evaluator'):
        evaluators = [program.add_node(lp.CourierNode(Evaluator)) for _ in range(num_evaluators)]
    program.add_node(lp.PyClassNode(Evolver, evaluators, dim=dim, population=population, seed=seed,
                                    max_generations=max_generations, result_path=result_path),
                     label='evolver')
    return program
