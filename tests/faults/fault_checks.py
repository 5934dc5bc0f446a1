"""What a fault run left behind, checked: updates lost or applied twice, and the final state.

    counts = check_updates(run_dir, actors=3, updates=120, complete=True)
    counts == {'applied': 360, 'acknowledged': 360, 'lost': 0, 'applied_twice': 0, 'gaps': 0,
               'went_back': 0, 'state_wrong': 0, 'incomplete': 0}
"""

from __future__ import annotations

import collections
import json
import os

import numpy as np

import fault_nodes


def _log(run_dir: str) -> list[tuple[int, int]]:
    path = os.path.join(run_dir, 'params.log')
    if not os.path.exists(path):
        return []
    with open(path) as log:
        return [tuple(map(int, line.split())) for line in log if line.endswith('\n')]


def _ledgers(run_dir: str, actors: int) -> tuple[set[tuple[int, int]], int]:
    """Every (actor, number) an actor saw acknowledged, and how often a read went back."""
    acknowledged, went_back = set(), 0
    for actor in range(actors):
        path = os.path.join(run_dir, f'acked-{actor}')
        if not os.path.exists(path):
            continue
        with open(path) as ledger:
            for line in ledger:
                if line.startswith('went-back'):
                    went_back += 1
                elif line.endswith('\n'):
                    acknowledged.add((actor, int(line)))
    return acknowledged, went_back


def check_updates(run_dir: str, actors: int, updates: int, complete: bool) -> dict:
    """Counts of what went wrong with the updates; ``complete``: the program said all were in."""
    log = _log(run_dir)
    applied = set(log)
    acknowledged, went_back = _ledgers(run_dir, actors)
    counts = collections.Counter(log)
    gaps = 0
    for actor in range(actors):
        numbers = sorted(n for a, n in applied if a == actor)
        gaps += sum(1 for position, number in enumerate(numbers, 1) if number != position)
    result = {'applied': len(applied), 'acknowledged': len(acknowledged),
              'lost': len(acknowledged - applied),
              'applied_twice': sum(c - 1 for c in counts.values() if c > 1),
              'gaps': gaps, 'went_back': went_back, 'state_wrong': 0, 'incomplete': 0}
    if complete:
        result['incomplete'] = actors * updates - len(applied)
        with open(os.path.join(run_dir, 'result.json')) as f:
            state = json.load(f)['state']
        expected = sum((fault_nodes.delta(a, n) for a, n in log), np.zeros(fault_nodes.SIZE,
                                                                           np.int64))
        result['state_wrong'] = int(state['version'] != len(log)
                                    or state['params'] != expected.tolist())
    return result
