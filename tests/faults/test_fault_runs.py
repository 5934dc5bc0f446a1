"""Fault injection: launches of a representative program, each hit by one fault at random.

Opt-in: ``LP_FAULT_RUNS=100 .venv/bin/python -m pytest tests/faults/test_fault_runs.py -s``
(``-k slurm`` for one launcher: local_mp, ssh, slurm)
(``LP_FAULT_SEED`` picks the faults; ``LP_FAULT_REPORT=DIR`` writes each launcher's
runs and totals there as JSON). The program (``fault_nodes``) is a durable parameter
server behind a ``CacherNode``, three actors pushing numbered updates, and a
coordinator; params, cache and actors restart (lp.Restart), the coordinator stops
the program (the default). Each run counts (all must be 0): runs that did not end
as their policy says, hangs, processes left, stops slower than grace + 1 s,
updates lost or applied twice. Two fixed runs (a restarted params, a killed
coordinator) are part of the default suite.
"""

from __future__ import annotations

import collections
import json
import os
import random

import pytest

from conftest import SSH_HOST_NAMES, needs_slurm, needs_ssh_hosts
from injector import GRACE_S, one_run

RUNS = int(os.environ.get('LP_FAULT_RUNS', '0'))
LAUNCH_TYPES = ['local_mp', pytest.param('ssh', marks=needs_ssh_hosts),
                pytest.param('slurm', marks=needs_slurm)]


def _hosts(launch_type: str) -> list[str]:
    return SSH_HOST_NAMES if launch_type == 'ssh' else []


def _problems(run: dict) -> dict[str, int]:
    """What went wrong in one run, by the issue's counts."""
    updates = run['updates']
    return {
        'not_as_policy_says': int(run['ended'] not in run['expected']),
        'hangs': int(run['hang']),
        'processes_left': run['left'],
        'slow_stops': int(run['stop_s'] is not None and run['stop_s'] > GRACE_S + 1.0),
        'lost_updates': updates['lost'] + updates['gaps'] + updates['incomplete'],
        'double_applied_updates': updates['applied_twice'] + updates['state_wrong'],
        'stale_reads_going_back': updates['went_back'],
    }


def _line(index: int, run: dict) -> str:
    fault = run['fault']
    stop = f'{run["stop_s"]:.2f}s' if run['stop_s'] is not None else '-'
    bad = {k: v for k, v in _problems(run).items() if v}
    return (f'run {index:3d}: {fault["kind"]:13s} {fault["victim"]:13s} ended {run["ended"]:18s} '
            f'stop {stop:6s} applied {run["updates"]["applied"]:3d} '
            f'restarts {sum(run["restarts"].values()):2d} {bad or ""}')


def _summary(runs: list[dict]) -> dict:
    totals = collections.Counter()
    for run in runs:
        totals.update(_problems(run))
    stops = [r['stop_s'] for r in runs if r['stop_s'] is not None]
    return {'runs': len(runs), **{k: totals[k] for k in _problems(runs[0])},
            'faults': dict(collections.Counter(r['fault']['kind'] for r in runs)),
            'victims': dict(collections.Counter(r['fault']['victim'].split('/')[0] for r in runs)),
            'endings': dict(collections.Counter(r['ended'] for r in runs)),
            'restarts': sum(sum(r['restarts'].values()) for r in runs),
            'slowest_stop_s': max(stops, default=None), 'grace_s': GRACE_S}


@pytest.mark.skipif(RUNS <= 0, reason='fault run; set LP_FAULT_RUNS=100 to run it')
@pytest.mark.timeout(200 * max(RUNS, 1))
@pytest.mark.parametrize('launch_type', LAUNCH_TYPES)
def test_random_faults_end_as_the_policy_says(launch_type):
    """RUNS launches, one random fault each: every count of the issue is 0."""
    rng = random.Random(int(os.environ.get('LP_FAULT_SEED', '14')))
    runs = []
    for index in range(RUNS):
        runs.append(one_run(rng, launch_type, _hosts(launch_type)))
        print(_line(index, runs[-1]), flush=True)
    summary = _summary(runs)
    print(json.dumps(summary, indent=1))
    if os.environ.get('LP_FAULT_REPORT'):
        with open(os.path.join(os.environ['LP_FAULT_REPORT'], f'faults_{launch_type}.json'),
                  'w') as f:
            json.dump({'summary': summary, 'runs': runs}, f, indent=1)
    assert all(summary[k] == 0 for k in _problems(runs[0])), summary


def test_killed_params_server_restarts_and_no_update_is_lost_or_doubled():
    """local_mp: SIGKILL of the parameter server mid-run; it restarts from its log, the program
    finishes, every acknowledged update is applied exactly once."""
    run = one_run(random.Random(1), 'local_mp', [], plan=('params', 'kill'), delay=2.0)
    assert run['ended'] == 'finished' and run['restarts']['params/0'] >= 1, run
    assert not any(_problems(run).values()), _problems(run)


def test_killed_coordinator_stops_the_program_within_the_grace_period():
    """local_mp: SIGKILL of the coordinator (default policy) fails the program, naming it,
    and the stop takes less than the grace period + 1 s; nothing is left."""
    run = one_run(random.Random(2), 'local_mp', [], plan=('coordinator', 'kill'), delay=2.0)
    assert run['ended'] == 'failed:coordinator' and 'SIGKILL' in run['why'], run
    assert not any(_problems(run).values()), _problems(run)
