"""What happens when a node fails: stop the program (the default) or restart the node.

    lp.launch(p, failure_policy={'actor': lp.Restart(max_restarts=10, backoff=(1.0, 60.0)),
                                 'learner': lp.StopProgram()})

A ``Restart`` group's failed node is started again after an exponential
backoff with jitter (so a crash loop costs little and many nodes that fail
together do not come back in lockstep), keeping its address; once it has
been restarted ``max_restarts`` times, its next failure stops the program.
Restarts after a loss that was not the node's fault (a lost host, an evicted
pod) do not count against ``max_restarts``, but are bounded apart by
``max_uncounted``: a node whose host never returns would otherwise restart
forever.
The launchers' controller and ``MultiProcessingColocation`` share this code
(and ``Alarms``, to run the restarts when they are due).
"""

from __future__ import annotations

import dataclasses
import random
import time
from typing import Hashable, Mapping


@dataclasses.dataclass(frozen=True)
class StopProgram:
    """A failed node stops the whole program; ``wait()`` raises its failure (the default)."""


@dataclasses.dataclass(frozen=True)
class Restart:
    """A failed node is restarted, at most ``max_restarts`` times, after a backoff.

    ``backoff=(initial, maximum)`` seconds: the n-th restart (n = 0, 1, ...)
    waits a random time in ``[b/2, b]`` with ``b = min(maximum, initial * 2**n)``.
    ``max_uncounted``: how many restarts after losses that were not the node's
    fault (``FailureReport.lost_by``) it may have besides; the next such loss
    stops the program, as a platform that keeps losing the node will not heal.
    """

    max_restarts: int = 10
    backoff: tuple[float, float] = (1.0, 60.0)
    max_uncounted: int = 100

    def __post_init__(self) -> None:
        for name in ('max_restarts', 'max_uncounted'):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f'lp.Restart {name} must be an int >= 0 (got {value!r})')
        backoff = self.backoff
        if (not isinstance(backoff, (tuple, list)) or len(backoff) != 2
                or not all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in backoff)
                or not 0 <= backoff[0] <= backoff[1]):
            raise ValueError(f'lp.Restart backoff must be (initial, maximum) seconds with '
                             f'0 <= initial <= maximum, e.g. (1.0, 60.0) (got {backoff!r})')
        object.__setattr__(self, 'backoff', (float(backoff[0]), float(backoff[1])))

    def allows(self, restarts_done: int) -> bool:
        """Whether a node restarted ``restarts_done`` times may be restarted once more."""
        return restarts_done < self.max_restarts

    def allows_uncounted(self, uncounted_done: int) -> bool:
        """Whether a node restarted ``uncounted_done`` times after losses not its own may be
        restarted once more after another."""
        return uncounted_done < self.max_uncounted

    def delay(self, restarts_done: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before the restart that follows ``restarts_done`` restarts."""
        initial, maximum = self.backoff
        bound = min(maximum, initial * 2.0 ** min(restarts_done, 64))
        return (rng or random).uniform(bound / 2, bound)

    def exhausted(self, restarts_done: int) -> str:
        """Why a node that failed once more is not restarted, for its failure summary."""
        return (f'it had been restarted {restarts_done} times, as many as '
                f'lp.Restart(max_restarts={self.max_restarts}) allows, so the program stops')

    def exhausted_uncounted(self, reasons: dict[str, int]) -> str:
        """Why a node lost once more by its platform is not restarted; ``reasons`` are the
        uncounted restarts it had, by reason."""
        total = sum(reasons.values())
        listed = ', '.join(f'{why} {n}' for why, n in sorted(reasons.items()))
        return (f'it had been restarted {total} times after losses that were not its fault '
                f'({listed}), as many as lp.Restart(max_uncounted={self.max_uncounted}) '
                'allows, so the program stops')


Policy = StopProgram | Restart
DEFAULT = StopProgram()


def check(policies: Mapping[str, Policy] | None, groups, program_name: str) -> dict[str, Policy]:
    """The policies as a dict, after checking every group exists and every value is a policy."""
    from launchpad_py import errors
    if policies is None:
        return {}
    if not isinstance(policies, Mapping):
        raise errors.ProgramError(
            f'failure_policy must map group labels to lp.Restart(...) or lp.StopProgram() '
            f'(got {policies!r})')
    unknown = sorted(set(policies) - set(groups))
    if unknown:
        raise errors.ProgramError(
            f'failure_policy names groups {unknown} that program {program_name!r} does not '
            f'have; its groups are {sorted(groups)}')
    for group, policy in policies.items():
        if not isinstance(policy, (Restart, StopProgram)):
            raise errors.ProgramError(
                f'failure_policy[{group!r}] must be lp.Restart(...) or lp.StopProgram() '
                f'(got {policy!r})')
    return dict(policies)


class Alarms:
    """Keyed moments (``time.monotonic()``) for a supervisor loop to wait on.

        alarms.set(('restart', worker), time.monotonic() + 2.0)
        queue.get(timeout=alarms.wait_time())
        for key in alarms.pop_due(): ...
    """

    def __init__(self) -> None:
        self._at: dict[Hashable, float] = {}

    def set(self, key: Hashable, when: float) -> None:
        self._at[key] = when

    def cancel(self, key: Hashable) -> None:
        self._at.pop(key, None)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._at

    def wait_time(self) -> float | None:
        """Seconds until the earliest deadline (0 if one is due), None without any."""
        if not self._at:
            return None
        return max(0.0, min(self._at.values()) - time.monotonic())

    def pop_due(self) -> list:
        """The keys whose moment has come, earliest first; they are forgotten."""
        now = time.monotonic()
        due = sorted((when, n, key) for n, (key, when) in enumerate(self._at.items())
                     if when <= now)
        for _, _, key in due:
            del self._at[key]
        return [key for _, _, key in due]
