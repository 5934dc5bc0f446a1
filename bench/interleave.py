"""Call measures repeated in rounds across peers, with CPU per call.

Wall clock on a shared machine drifts over a run; measuring peer A fully and
then peer B puts that drift into the ratio.  Here every peer is started
first, and each round runs one repetition of every call measure on every
peer (round 0 is the warm-up and is dropped), so the medians of A and B come
from the same minutes.  Each repetition is wrapped in a :class:`CpuMeter`
snapshot of the caller and the server process(es), giving CPU microseconds
and context switches per call beside the wall-clock figure.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Callable

from . import procs
from .cpu import CpuMeter, Usage
from .harness import Budget, Result, call_loop
from .peer import FaninPool

TINY_BUDGET = Budget(max_calls=20_000, max_seconds=0.4)
INFLIGHT_BUDGET = Budget(max_calls=100_000, max_seconds=0.5)
FANIN_BUDGET = Budget(max_calls=200_000, max_seconds=1.0)
INFLIGHT_DEPTHS = (8, 64)
FANIN_CALLERS = (4, 16)


@dataclass
class CallMeasure:
    """One row: ``rep()`` returns (value in ``unit``, calls made, CPU used outside the meter)."""

    name: str
    unit: str
    rep: Callable[[], tuple[float, int, Usage]]
    higher_is_better: bool = False
    note: str = ""


def server_pids(peer) -> list[int]:
    pid = peer.server_pid()
    return [pid, *procs.descendants(pid)] if pid else []


def call_measures(peer) -> list[CallMeasure]:
    """tiny_sync and the in-flight rows of one started peer."""
    def tiny():
        n, dt = call_loop(lambda: peer.call("echo", 1), TINY_BUDGET)
        return dt / n * 1e6, n, Usage()

    out = [CallMeasure("tiny_sync", "us/call", tiny)]
    for depth in INFLIGHT_DEPTHS:
        def inflight(depth=depth):
            n, dt = peer.inflight("echo", (1,), depth, INFLIGHT_BUDGET)
            return n / dt, n, Usage()

        out.append(CallMeasure(f"inflight{depth}", "calls/s", inflight, higher_is_better=True))
    if hasattr(peer, "inflight_threads"):
        def threads():
            n, dt = peer.inflight_threads("echo", (1,), 8, INFLIGHT_BUDGET)
            return n / dt, n, Usage()

        out.append(CallMeasure("inflight8_threads", "calls/s", threads, higher_is_better=True,
                               note="8 client threads, sync calls"))
    return out


def run_rounds(plans: dict, reps: int, log) -> list[Result]:
    """``plans``: peer name -> (CpuMeter, [CallMeasure]); one warm-up round, then ``reps``."""
    results: dict[tuple[str, str], Result] = {}
    for rnd in range(reps + 1):
        for name, (meter, measures) in plans.items():
            for m in measures:
                r = results.setdefault((m.name, name), Result(
                    m.name, name, m.unit, higher_is_better=m.higher_is_better, note=m.note))
                if r.note.startswith("error"):
                    continue
                log(f"round {rnd}/{reps}: {name}: {m.name}")
                try:
                    before = meter.snapshot()
                    value, calls, outside = m.rep()
                    after = meter.snapshot()
                except Exception as e:  # noqa: BLE001 - reported in the table
                    traceback.print_exc()
                    r.note, r.values = f"error: {type(e).__name__}: {e}", []
                    continue
                if rnd == 0:
                    continue
                cpu_us, switches = meter.per_call(before, after, calls, outside)
                r.values.append(value)
                r.cpu_us_per_call.append(cpu_us)
                r.switches_per_call.append(switches)
    return list(results.values())


def interleaved(peers: dict, reps: int, log) -> list[Result]:
    """Every call row of every started peer in ``peers`` (name -> peer), interleaved."""
    pids = {name: server_pids(peer) for name, peer in peers.items()}
    plans = {name: (CpuMeter(pids[name]), call_measures(peer)) for name, peer in peers.items()}
    results = run_rounds(plans, reps, log)
    for callers in FANIN_CALLERS:
        pools, plans = {}, {}
        try:
            for name, peer in peers.items():
                spec = peer.fanin_spec() if "fanin" in peer.supports else None
                if spec is None:
                    continue
                log(f"{name}: starting {callers} fan-in callers")
                try:
                    pool = pools[name] = FaninPool(spec, callers)
                except Exception as e:  # noqa: BLE001 - reported in the table
                    results.append(Result(f"fanin{callers}", name, "calls/s",
                                          note=f"error: {type(e).__name__}: {e}"))
                    continue

                def fanin(pool=pool):
                    return pool.rep(FANIN_BUDGET)

                # The callers report their own CPU; this process only waits.
                plans[name] = (CpuMeter(pids[name], include_self=False),
                               [CallMeasure(f"fanin{callers}", "calls/s", fanin, True)])
            results += run_rounds(plans, reps, log)
        finally:
            for pool in pools.values():
                pool.close()
    return results
