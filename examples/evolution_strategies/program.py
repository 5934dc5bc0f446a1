"""Evolution strategies: an evolver fans candidates out to evaluator nodes.

    evolver ──evaluate(candidates)──▶ evaluator × N

Each generation the evolver samples a population from its search
distribution (SNES), splits it evenly over the evaluators that are live at
that moment (a group handle lists them) with ``evaluator.futures.evaluate(...)``,
and updates the distribution from the returned fitnesses (negative 10-D
Rastrigin: higher is better, 0 is the optimum). A part whose evaluator left
or failed goes to another one, and each part's result is taken once, so the
search is the same however the group changes (``elastic=True`` lets it grow
and shrink while the program runs). It stops once the search distribution
has shrunk below ``sigma_tolerance`` or after ``max_generations``, writes a
summary to ``result_path`` (JSON) if given, and ends the program.
"""

from __future__ import annotations

import concurrent.futures
import json
import time

import numpy as np

import launchpad_py as lp
from launchpad_py import courier
from examples.evolution_strategies.strategy import SNES, rastrigin

# An evaluator that left (or died) fails its calls with these: its part goes elsewhere.
_GONE = (courier.CourierUnavailableError, courier.CourierCancelledError)


class Evaluator:
    """Scores candidates; the objective is cheap here, a simulation in real use
    (``simulation_s`` stands for one: seconds spent per call)."""

    def __init__(self, simulation_s: float = 0.0):
        self._simulation_s = simulation_s

    def evaluate(self, candidates: np.ndarray) -> np.ndarray:
        if self._simulation_s:
            time.sleep(self._simulation_s)  # The simulation's cost, not a synchronization.
        return -rastrigin(np.asarray(candidates))


class Evolver:
    """``evaluators``: the group's members (a group handle), or a fixed list of clients."""

    def __init__(self, evaluators, dim: int = 10, population: int = 100, seed: int = 0,
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
            evaluated = self._evaluate(self._strategy.ask())
            if evaluated is None:
                return  # The program is stopping.
            fitness, evaluators = evaluated
            self._strategy.tell(fitness)
            fitness_of_mean = float(-rastrigin(self._strategy.mean))
            history.append({'generation': generation, 'best': float(fitness.max()),
                            'fitness_of_mean': fitness_of_mean,
                            'sigma': float(self._strategy.sigma.max()),
                            'evaluators': evaluators, 'evaluated': len(fitness)})
            if generation % 10 == 0 or self._converged():
                print(f'evolver: generation {generation}: best {fitness.max():8.3f}, '
                      f'mean of population {fitness.mean():8.3f}, fitness of the mean '
                      f'{fitness_of_mean:8.3f}, sigma {self._strategy.sigma.max():.4f}', flush=True)
            if self._converged():
                break
        self._finish(history, time.monotonic() - start)

    def _evaluate(self, population: np.ndarray) -> tuple[np.ndarray, int] | None:
        """Every candidate's fitness, each taken once, and how many evaluators were live when
        the generation began; None once the program stops."""
        stop, parts = lp.stop_event(), None
        results: dict[int, np.ndarray] = {}
        while parts is None or len(results) < len(parts):
            clients = list(self._evaluators)
            if not clients:  # None live right now: wait for one to join.
                if stop.wait(0.1):
                    return None
                continue
            if parts is None:
                parts = np.array_split(population, len(clients))
            missing = [i for i in range(len(parts)) if i not in results]
            calls = {clients[n % len(clients)].futures.evaluate(parts[i]): i
                     for n, i in enumerate(missing)}
            if self._collect(calls, results, stop) is None:
                return None
        return np.concatenate([results[i] for i in range(len(parts))]), len(parts)

    @staticmethod
    def _collect(calls: dict, results: dict, stop) -> dict | None:
        """Waits for ``calls``, keeping the results of those that succeeded; None on stop."""
        pending = set(calls)
        while pending:
            _, pending = concurrent.futures.wait(pending, timeout=0.25)
            if stop.is_set():
                return None
        for future, part in calls.items():
            error = future.exception()
            if error is None:
                results[part] = future.result()
            elif not isinstance(error, _GONE):
                raise error
        return results

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
                 max_generations: int = 500, result_path: str | None = None,
                 elastic: bool = False, simulation_s: float = 0.0) -> lp.Program:
    """``elastic=True``: evaluators may join and leave while it runs (see examples/elastic.py)."""
    program = lp.Program('evolution_strategies')
    with program.group('evaluator', elastic=elastic):
        for _ in range(num_evaluators):
            program.add_node(lp.CourierNode(Evaluator, simulation_s))
    program.add_node(lp.PyClassNode(Evolver, program.group_handle('evaluator'), dim=dim,
                                    population=population, seed=seed,
                                    max_generations=max_generations, result_path=result_path),
                     label='evolver')
    return program
