"""Separable natural evolution strategies (SNES) and the objective it minimizes.

SNES keeps a Gaussian search distribution with a mean and one standard
deviation per dimension, and follows the natural gradient of expected
rank-shaped fitness for both (Schaul et al., 2011). No launchpad here:

    strategy = SNES(dim=10, seed=0)
    candidates = strategy.ask()
    strategy.tell(fitnesses)          # higher is better
"""

from __future__ import annotations

import numpy as np


def rastrigin(x: np.ndarray) -> np.ndarray:
    """Rastrigin's function of each row; global minimum 0 at the origin, many local minima."""
    return 10.0 * x.shape[-1] + np.sum(x * x - 10.0 * np.cos(2 * np.pi * x), axis=-1)


def rank_utilities(size: int) -> np.ndarray:
    """Weights for candidates sorted best first: only the better half pulls, summing to zero."""
    raw = np.maximum(0.0, np.log(size / 2 + 1) - np.log(np.arange(1, size + 1)))
    return raw / raw.sum() - 1.0 / size


class SNES:
    def __init__(self, dim: int, seed: int, population: int = 100, init_mean: float = 3.0,
                 init_sigma: float = 2.0):
        self._rng = np.random.default_rng(seed)
        self.mean = np.full(dim, init_mean)
        self.sigma = np.full(dim, init_sigma)
        self._population = population + population % 2   # Mirrored pairs.
        self._eta_sigma = (3 + np.log(dim)) / (5 * np.sqrt(dim))
        self._utilities = rank_utilities(self._population)
        self._noise: np.ndarray | None = None

    def ask(self) -> np.ndarray:
        """A population of candidates, ``[population, dim]``."""
        half = self._rng.standard_normal((self._population // 2, self.mean.size))
        self._noise = np.concatenate([half, -half])
        return self.mean + self.sigma * self._noise

    def tell(self, fitness: np.ndarray) -> None:
        """Updates mean and sigma from the fitness of the last ``ask()`` population."""
        if self._noise is None or len(fitness) != len(self._noise):
            raise ValueError(f'tell() needs one fitness per candidate of the last ask() '
                             f'(got {len(fitness)})')
        order = np.argsort(-np.asarray(fitness))
        noise, weights = self._noise[order], self._utilities
        self.mean = self.mean + self.sigma * (weights @ noise)
        self.sigma = self.sigma * np.exp(0.5 * self._eta_sigma * (weights @ (noise ** 2 - 1)))
        self._noise = None
