"""Call rates between two Ray-placed processes on two hosts: courier against Ray actor calls.

Both on the Ray test cluster (``bash scripts/ray_cluster.sh up``), server on h1, caller on
h2, so every call crosses the bridge between two network namespaces:

- courier: ``launch_type='ray'`` places a ``CourierNode(Echo)`` on h1 and a caller node on
  h2; the caller calls the server over courier (raw TCP with the program secret);
- ray: an ``Echo`` actor on h1 called by an actor on h2 with ``ray.get(echo.ping.remote())``.

Each measures tiny synchronous calls (one at a time) and 8 calls in flight, for
``--seconds`` each, ``--reps`` times interleaved; medians are reported::

    python -m bench.ray_calls --json bench/ray_calls.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import time

import launchpad_py as lp

RAY_ADDRESS_FILE = os.path.join(os.environ.get('LP_RAY_DIR', '/tmp/lp-ray'), 'address')
IN_FLIGHT = 8


class Echo:
    def ping(self, value=None):
        return value


def _rates(call, submit, wait, seconds: float) -> dict[str, float]:
    """Calls/s one at a time (``call``), then with IN_FLIGHT outstanding (``submit``/``wait``)."""
    for _ in range(50):  # Warm: connections, code paths.
        call()
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        call()
        count += 1
    sync = count / (time.perf_counter() - start)
    pending = collections.deque(submit() for _ in range(IN_FLIGHT))
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        wait(pending.popleft())
        pending.append(submit())
        count += 1
    for ref in pending:
        wait(ref)
    return {'sync_calls_per_s': sync, 'inflight_calls_per_s': count / (time.perf_counter() - start)}


class CourierCaller:
    """A node on h2 calling the courier server on h1."""

    def __init__(self, server):
        self._server = server

    def measure(self, seconds: float) -> dict[str, float]:
        client = self._server
        return _rates(client.ping, client.futures.ping, lambda f: f.result(), seconds)


class RayCaller:
    """An actor on h2 calling the Echo actor on h1."""

    def measure(self, echo, seconds: float) -> dict[str, float]:
        import ray
        return _rates(lambda: ray.get(echo.ping.remote()), echo.ping.remote, ray.get, seconds)


def courier_rates(address: str, seconds: float, reps: int) -> list[dict]:
    program = lp.Program('callrate')
    server = program.add_node(lp.CourierNode(Echo), label='server')
    caller = program.add_node(lp.CourierNode(CourierCaller, server), label='caller')
    with lp.launch(program, launch_type='ray', ray_options={'address': address}, resources={
            'server': lp.RayResources(resources={'h1': 1}),
            'caller': lp.RayResources(resources={'h2': 1})}):
        client = caller.dereference()
        return [client.measure(seconds) for _ in range(reps)]


def ray_rates(seconds: float, reps: int) -> list[dict]:
    import ray
    echo = ray.remote(Echo).options(resources={'h1': 1}, num_cpus=1).remote()
    caller = ray.remote(RayCaller).options(resources={'h2': 1}, num_cpus=1).remote()
    try:
        return [ray.get(caller.measure.remote(echo, seconds)) for _ in range(reps)]
    finally:
        ray.kill(echo)
        ray.kill(caller)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--seconds', type=float, default=3.0)
    parser.add_argument('--reps', type=int, default=3)
    parser.add_argument('--json', help='also write the results to this file')
    args = parser.parse_args()
    with open(RAY_ADDRESS_FILE) as address_file:
        address = address_file.read().strip()
    # Ray's workers import this module: give them our import path, as the nodes get it.
    os.environ['PYTHONPATH'] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    courier = courier_rates(address, args.seconds, args.reps)  # Connects this driver to Ray.
    ray = ray_rates(args.seconds, args.reps)
    rows = {}
    for name, runs in (('courier', courier), ('ray_actor', ray)):
        rows[name] = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    print(f'{"calls/s, h2 -> h1":<20}{"sync":>10}{f"{IN_FLIGHT} in flight":>14}', file=sys.stderr)
    for name, row in rows.items():
        print(f'{name:<20}{row["sync_calls_per_s"]:>10.0f}{row["inflight_calls_per_s"]:>14.0f}',
              file=sys.stderr)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'seconds': args.seconds, 'reps': args.reps, 'in_flight': IN_FLIGHT,
                       'results': rows}, f, indent=2)


if __name__ == '__main__':
    main()
