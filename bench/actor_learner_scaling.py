"""How the actor-learner example scales: env steps/s against the number of actors.

Run from the repository root (needs the ``examples`` extra; the learner uses a
GPU when JAX sees one, actors and evaluator stay on the CPU)::

    python -m bench.actor_learner_scaling --actors 2,4,8,14 --json bench/device/actor_learner_scaling.json

Each point launches ``examples/actor_learner`` with ``local_mp`` and N actors,
with a target return it never reaches, lets it warm up (``--warmup`` s: JAX
compiles, queues fill), then reads the learner's ``progress()`` twice,
``--seconds`` apart. Reported per point: env steps/s, learner updates/s, and
the share of the learner loop's time spent waiting for a batch (starved) or
updating (busy), and the CPU the learner's process used (in cores: near 1
means its GIL, shared by the training loop and every actor's calls, is the
limit); the scaling is each point's env steps/s over the first one's.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import threading
import time

import launchpad_py as lp
from examples.actor_learner import program as actor_learner

from .futures_profile import thread_counters


def measure(actors: int, warmup: float, seconds: float) -> dict:
    config = dataclasses.replace(actor_learner.Config(), num_actors=actors,
                                 target_return=float('inf'), max_env_steps=1 << 62)
    program = actor_learner.make_program(config)
    learner = program.groups['learner'][0].create_handle()
    with contextlib.redirect_stdout(io.StringIO()):
        controller = lp.launch(program, launch_type='local_mp', terminal='output_to_files',
                               local_resources=actor_learner.cpu_only_resources())
    pause = threading.Event()
    try:
        client = learner.dereference()
        client.progress()  # Up and answering.
        pid = next(s.pid for s in controller.statuses() if s.label == 'learner')
        pause.wait(warmup)
        first, start, cpu = client.progress(), time.perf_counter(), _cpu_seconds(pid)
        pause.wait(seconds)
        last, elapsed = client.progress(), time.perf_counter() - start
        cpu = _cpu_seconds(pid) - cpu
    finally:
        controller.stop()
    waited, updating = (_delta(first, last, key) for key in ('waited_s', 'updating_s'))
    return {'actors': actors, 'seconds': elapsed, 'learner_cpu_cores': cpu / elapsed,
            'env_steps_per_s': _delta(first, last, 'env_steps') / elapsed,
            'updates_per_s': _delta(first, last, 'step') / elapsed,
            'learner_waiting': waited / (waited + updating) if waited + updating else None,
            'learner_updating': updating / (waited + updating) if waited + updating else None}


def _delta(first: dict, last: dict, key: str) -> float:
    """How much ``key`` of the learner's progress grew (0 for a learner that does not count it)."""
    return last.get(key, 0) - first.get(key, 0)


def _cpu_seconds(pid: int) -> float:
    """User and kernel CPU seconds of every thread of process ``pid`` so far."""
    return sum(user + kernel for user, kernel, _, _ in thread_counters(pid).values())


def _percent(share: float | None) -> str:
    return '-' if share is None else f'{share:.0%}'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--actors', default='2,4,8,14', help='comma list of actor counts')
    parser.add_argument('--warmup', type=float, default=15.0, help='seconds before measuring')
    parser.add_argument('--seconds', type=float, default=20.0, help='seconds measured')
    parser.add_argument('--json', help='write the results here')
    args = parser.parse_args()
    report = {'cpus': os.cpu_count(), 'load_average_start': os.getloadavg(), 'points': []}
    print(f'{"actors":>6} {"env steps/s":>12} {"scaling":>8} {"updates/s":>10} '
          f'{"learner waiting":>16} {"updating":>9} {"learner CPU":>12}')
    for actors in [int(n) for n in args.actors.split(',') if n]:
        point = measure(actors, args.warmup, args.seconds)
        report['points'].append(point)
        scaling = point['env_steps_per_s'] / report['points'][0]['env_steps_per_s']
        point['scaling'] = scaling
        print(f'{actors:>6} {point["env_steps_per_s"]:>12,.0f} {scaling:>7.2f}x '
              f'{point["updates_per_s"]:>10.1f} {_percent(point["learner_waiting"]):>16} '
              f'{_percent(point["learner_updating"]):>9} '
              f'{point["learner_cpu_cores"]:>7.2f} cores', flush=True)
    report['load_average_end'] = os.getloadavg()
    if args.json:
        with open(args.json, 'w') as out:
            json.dump(report, out, indent=1)


if __name__ == '__main__':
    main()
