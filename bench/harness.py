"""Timing helpers.

A *measure* is one function that runs a bounded repetition and returns one
number (already in its unit, e.g. microseconds per call).  :func:`measure`
runs it ``warmup`` times (discarded) and then ``reps`` times, and reports the
median and the min-max spread.  Every repetition is bounded both in count and
in time through :func:`call_loop` / :class:`Budget`, so each measure stops by
itself.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field

DEFAULT_REPS = 5


@dataclass(frozen=True)
class Budget:
    """Bounds for one repetition: at most ``max_calls`` or ``max_seconds``."""

    max_calls: int = 20_000
    max_seconds: float = 0.4
    min_calls: int = 1


@dataclass
class Result:
    """One measured quantity for one peer."""

    measure: str  # e.g. "tiny_sync"
    peer: str  # e.g. "floor_unix"
    unit: str  # e.g. "us/call", "calls/s"
    values: list[float] = field(default_factory=list)
    higher_is_better: bool = False
    note: str = ""
    extra: dict = field(default_factory=dict)
    # Per repetition, where measured (see bench.cpu): CPU microseconds and
    # context switches per call, summed over the caller and server processes.
    cpu_us_per_call: list[float] = field(default_factory=list)
    switches_per_call: list[float] = field(default_factory=list)

    @property
    def median(self) -> float | None:
        return statistics.median(self.values) if self.values else None

    @property
    def min(self) -> float | None:
        return min(self.values) if self.values else None

    @property
    def max(self) -> float | None:
        return max(self.values) if self.values else None

    @property
    def cpu_median(self) -> float | None:
        return statistics.median(self.cpu_us_per_call) if self.cpu_us_per_call else None

    @property
    def switches_median(self) -> float | None:
        return statistics.median(self.switches_per_call) if self.switches_per_call else None

    def to_json(self) -> dict:
        d = asdict(self)
        d.update(median=self.median, min=self.min, max=self.max,
                 cpu_us_per_call_median=self.cpu_median,
                 switches_per_call_median=self.switches_median)
        return d


def call_loop(fn, budget: Budget) -> tuple[int, float]:
    """Calls ``fn()`` until ``budget`` is used up; returns (calls, seconds)."""
    perf = time.perf_counter
    t0 = perf()
    deadline = t0 + budget.max_seconds
    n = 0
    while n < budget.max_calls:
        fn()
        n += 1
        if n >= budget.min_calls and perf() >= deadline:
            break
    return n, perf() - t0


def measure(rep, reps: int = DEFAULT_REPS, warmup: int = 1) -> list[float]:
    """Runs ``rep()`` ``warmup`` times (ignored), then ``reps`` times."""
    for _ in range(warmup):
        rep()
    return [float(rep()) for _ in range(reps)]


def per_call_us(fn, budget: Budget):
    """A repetition function returning microseconds per call of ``fn``."""

    def rep():
        n, dt = call_loop(fn, budget)
        return dt / n * 1e6

    return rep


def calls_per_s(fn, budget: Budget):
    """A repetition function returning calls per second of ``fn``."""

    def rep():
        n, dt = call_loop(fn, budget)
        return n / dt

    return rep


def fmt_value(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit in ("bytes", "B"):
        return f"{v / 2**20:.1f} MiB"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}"
