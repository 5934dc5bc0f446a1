"""How the actor-learner example scales: env steps/s against the number of actors.

Run from the repository root (needs the ``examples`` extra; the learner uses a
GPU when JAX sees one, actors and evaluator stay on the CPU)::

    python -m bench.actor_learner_scaling --actors 2,4,8,14 --json bench/device/actor_learner_scaling.json

Each point launches ``examples/actor_learner`` with ``local_mp`` and N actors,
with a target return it never reaches, waits for the learner's first update
(it compiles its step for every batch size before that one), lets it run
``--warmup`` s more (queues fill), then reads the learner's ``progress()``
twice, ``--seconds`` apart. Reported per point: env steps/s, learner
updates/s and unrolls per update (its batch grows with the supply), the share
of the learner loop's time spent waiting for a batch (starved) or updating
(busy), and the CPU the learner's process used (in cores: near 1 means its
GIL, shared by the training loop and every actor's calls, is the limit) and
all actors together (near the actor count: the actors are the limit); the
scaling is each point's env steps/s over the first one's. The JSON is written
after every point, so a run cut short keeps the points it finished.

``--update-batches 16,64,128`` instead times the learner's update alone, in
this process, on real unrolls: stacking, the jitted step, and a host copy of
the parameters (what one actor's request costs after a step).
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
from examples.actor_learner import replay as replay_lib

from .futures_profile import thread_counters

_COMPILE_S = 120.0  # At most this long for the learner's first update.


def measure(actors: int, warmup: float, seconds: float, learner_platform: str = '',
            batch_growth: int = 0, **options) -> dict:
    """One point of the curve; ``options`` are further ``Config`` fields."""
    config = dataclasses.replace(actor_learner.Config(), num_actors=actors,
                                 target_return=float('inf'), max_env_steps=1 << 62, **options)
    if batch_growth:
        config = dataclasses.replace(config, batch_growth=batch_growth)
    program = actor_learner.make_program(config)
    learner = program.groups['learner'][0].create_handle()
    resources = actor_learner.cpu_only_resources()
    if learner_platform:  # e.g. 'cpu': is the learner's device what limits the curve?
        resources['learner'] = lp.PythonProcess(jax_platforms=learner_platform)
    with contextlib.redirect_stdout(io.StringIO()):
        controller = lp.launch(program, launch_type='local_mp', terminal='output_to_files',
                               local_resources=resources)
    pause = threading.Event()
    try:
        client = learner.dereference()
        started = time.perf_counter()
        while client.progress()['step'] < 1 and time.perf_counter() - started < _COMPILE_S:
            pause.wait(0.5)  # Compiling its step for every batch size.
        compiled_s = time.perf_counter() - started
        pids = {s.label: [] for s in controller.statuses()}
        for status in controller.statuses():
            pids[status.label].append(status.pid)
        pause.wait(warmup)
        first, start = client.progress(), time.perf_counter()
        cpu = {label: _cpu_seconds(pids[label]) for label in ('learner', 'actor')}
        pause.wait(seconds)
        last, elapsed = client.progress(), time.perf_counter() - start
        cpu = {label: _cpu_seconds(pids[label]) - cpu[label] for label in cpu}
    finally:
        controller.stop()
    waited, updating = (_delta(first, last, key) for key in ('waited_s', 'updating_s'))
    updates = _delta(first, last, 'step')
    phases = {name: 1e3 * (last['update_phases_s'][name] - first['update_phases_s'][name])
              / updates for name in last.get('update_phases_s', {})} if updates else {}
    copies = [b - a for a, b in zip(first.get('params_to_host', (0, 0)),
                                    last.get('params_to_host', (0, 0)))]
    return {'actors': actors, 'learner_platform': learner_platform or 'default',
            'unrolls_per_call': config.unrolls_per_call, 'publish': config.publish,
            'batch_sizes': list(replay_lib.batch_sizes(config.batch_size, config.batch_growth)),
            'seconds': elapsed, 'first_update_after_s': compiled_s,
            'update_phases_ms': phases,
            'params_to_host_ms': 1e3 * copies[1] / copies[0] if copies[0] else None,
            'learner_cpu_cores': cpu['learner'] / elapsed,
            'actors_cpu_cores': cpu['actor'] / elapsed,
            'env_steps_per_s': _delta(first, last, 'env_steps') / elapsed,
            'updates_per_s': updates / elapsed,
            'unrolls_per_update': (_delta(first, last, 'env_steps') / config.unroll_length
                                   / updates if updates else None),
            'learner_waiting': waited / (waited + updating) if waited + updating else None,
            'learner_updating': updating / (waited + updating) if waited + updating else None}


def _delta(first: dict, last: dict, key: str) -> float:
    """How much ``key`` of the learner's progress grew (0 for a learner that does not count it)."""
    return last.get(key, 0) - first.get(key, 0)


def _cpu_seconds(pids: list[int]) -> float:
    """User and kernel CPU seconds of every thread of these processes so far."""
    total = 0.0
    for pid in pids:
        try:
            total += sum(user + kernel for user, kernel, _, _ in thread_counters(pid).values())
        except OSError:  # Gone (it would be counted as a failure by the launcher).
            pass
    return total


def _percent(share: float | None) -> str:
    return '-' if share is None else f'{share:.0%}'


def time_updates(sizes: list[int], seconds: float) -> list[dict]:
    """The learner's per-update cost at each batch size, in this process (JAX's default
    device): wall and CPU ms per update (stack + step), and ms for one host copy of the
    parameters after a step."""
    import jax
    from examples.actor_learner import learning, network, rollout
    trainer = learning.Trainer(network.init(0, *rollout.env_spec()))
    unroller = rollout.Unroller(seed=1, length=actor_learner.Config().unroll_length)
    params = trainer.numpy_params()
    unrolls = [unroller.unroll(params) for _ in range(max(sizes))]
    rows = []
    for size in sizes:
        batch = unrolls[:size]
        trainer.compile(learning.stack(batch), size)
        updates, start, cpu = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - start < seconds:
            trainer.update(learning.stack(batch))
            updates += 1
        jax.block_until_ready(trainer.params)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        copy_start = time.perf_counter()
        learning.to_numpy(trainer.params)
        rows.append({'batch': size, 'ms_per_update': 1e3 * wall / updates,
                     'cpu_ms_per_update': 1e3 * cpu / updates,
                     'unrolls_per_s': size * updates / wall,
                     'params_to_host_ms': 1e3 * (time.perf_counter() - copy_start),
                     'device': str(trainer.device)})
        print(f'batch {size:>4}: {rows[-1]["ms_per_update"]:6.2f} ms per update '
              f'({rows[-1]["cpu_ms_per_update"]:.2f} ms CPU), {rows[-1]["unrolls_per_s"]:,.0f} '
              f'unrolls/s; parameters to the host {rows[-1]["params_to_host_ms"]:.2f} ms '
              f'({trainer.device})', flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--actors', default='2,4,8,14', help='comma list of actor counts')
    parser.add_argument('--warmup', type=float, default=10.0,
                        help='seconds from the learner\'s first update to measuring')
    parser.add_argument('--seconds', type=float, default=15.0, help='seconds measured')
    parser.add_argument('--update-batches', help='comma list of batch sizes: time the '
                        'learner\'s update alone at each (no program is launched)')
    parser.add_argument('--learner-platform', default='',
                        help="JAX platform for the learner (e.g. 'cpu'); default: JAX's choice")
    parser.add_argument('--batch-growth', type=int, default=0,
                        help='the learner takes up to batch_size × this many unrolls per update '
                        "(default: the example's)")
    parser.add_argument('--unrolls-per-call', type=int, default=1,
                        help='unrolls an actor sends in one call (Config.unrolls_per_call)')
    parser.add_argument('--publish', default='request', choices=('request', 'learner'),
                        help='who copies parameters to the host (Config.publish)')
    parser.add_argument('--json', help='write the results here')
    args = parser.parse_args()
    report = {'cpus': os.cpu_count(), 'load_average_start': os.getloadavg(), 'points': []}
    if args.update_batches:
        report['updates'] = time_updates([int(n) for n in args.update_batches.split(',')],
                                         args.seconds)
        _write(args.json, report)
        return
    print(f'{"actors":>6} {"env steps/s":>12} {"scaling":>8} {"updates/s":>10} '
          f'{"unrolls/update":>15} {"learner waiting":>16} {"updating":>9} '
          f'{"learner CPU":>12} {"actors CPU":>11}')
    for actors in [int(n) for n in args.actors.split(',') if n]:
        point = measure(actors, args.warmup, args.seconds, args.learner_platform,
                        args.batch_growth, unrolls_per_call=args.unrolls_per_call,
                        publish=args.publish)
        report['points'].append(point)
        scaling = point['env_steps_per_s'] / report['points'][0]['env_steps_per_s']
        point['scaling'] = scaling
        point['load_average'] = os.getloadavg()
        unrolls = point['unrolls_per_update']
        print(f'{actors:>6} {point["env_steps_per_s"]:>12,.0f} {scaling:>7.2f}x '
              f'{point["updates_per_s"]:>10.1f} {"-" if unrolls is None else f"{unrolls:.1f}":>15} '
              f'{_percent(point["learner_waiting"]):>16} '
              f'{_percent(point["learner_updating"]):>9} '
              f'{point["learner_cpu_cores"]:>6.2f} cores {point["actors_cpu_cores"]:>5.2f} cores',
              flush=True)
        print('        ms per update: ' + ', '.join(
            f'{name} {ms:.2f}' for name, ms in point['update_phases_ms'].items())
            + f'; parameters to host {point["params_to_host_ms"] or 0:.2f} ms', flush=True)
        report['load_average_end'] = os.getloadavg()
        _write(args.json, report)


def _write(path: str | None, report: dict) -> None:
    if path:
        with open(path, 'w') as out:
            json.dump(report, out, indent=1)


if __name__ == '__main__':
    main()
