"""A parameter server read by many requesters, in three topologies.

    single:      writer ─▶ server ◀─ requester × N

    replicated:  writer ─▶ server_0 ◀─ requesters 0, S, 2S, …
                   └─────▶ server_1 ◀─ requesters 1, S+1, …      (S replicas)

    cached:      writer ─▶ server ◀─ cacher ◀─ requester × N    (lp.CacherNode)

Requesters are courier nodes too: the meter asks all of them at once to read
parameters as fast as they can for ``duration_s``, adds up their counts,
prints the total queries per second, writes it to ``result_path`` (JSON) and
ends the program.

Each server keeps its version and parameters across restarts and requeues: it
saves them in ``lp.checkpoint_dir()`` every ``checkpoint_every`` updates and
before a planned stop, and starts from the last save when there is one.
"""

from __future__ import annotations

import json
import os
import threading
import time

import numpy as np

import launchpad_py as lp
from examples.calls import results_or_none

TOPOLOGIES = ('single', 'replicated', 'cached')


class ParamServer:
    """Holds a parameter vector and its version; ``get_params`` is what requesters call.

    It saves (version, params) in ``lp.checkpoint_dir()`` every ``checkpoint_every``
    updates (0: only before a planned stop) and in ``checkpoint()``, which runs before a
    planned stop, a preemption or a Slurm requeue; a server that starts where a save
    exists goes on from it, so a restarted or requeued server keeps its version and its
    parameters. Without a save it starts from ``seed`` as before.
    """

    def __init__(self, size: int, seed: int = 0, checkpoint_every: int = 1000):
        if checkpoint_every < 0:
            raise ValueError(f'checkpoint_every must be updates >= 0 (0: only before a stop) '
                             f'(got {checkpoint_every!r} for ParamServer)')
        self._lock = threading.Lock()
        self._saving = threading.Lock()  # One save at a time, each newer than the last.
        self._params = np.random.default_rng(seed).standard_normal(size).astype(np.float32)
        self._version = 0
        self._checkpoint_every = checkpoint_every
        self._checkpoint_path = os.path.join(lp.checkpoint_dir(), 'params.npz')
        self._resume()

    def _resume(self) -> None:
        if not os.path.exists(self._checkpoint_path):
            return
        with np.load(self._checkpoint_path) as saved:
            version, params = int(saved['version']), saved['params']
        if params.shape != self._params.shape:
            raise ValueError(f'the checkpoint {self._checkpoint_path} holds {params.shape[0]} '
                             f'parameters but this ParamServer has size {self._params.size}: '
                             f'remove it or start with the size it was saved with')
        self._version, self._params = version, params
        print(f'server: resumed from version {version}', flush=True)

    def checkpoint(self) -> None:
        """Saves (version, params) atomically: a crash mid-write keeps the last save."""
        with self._saving:
            version, params = self.get_params()
            temporary = self._checkpoint_path + '.tmp'
            with open(temporary, 'wb') as f:
                np.savez(f, version=np.int64(version), params=params)
            os.replace(temporary, self._checkpoint_path)
        print(f'server: saved version {version}', flush=True)

    def get_params(self) -> tuple[int, np.ndarray]:
        with self._lock:  # Writes replace the array, so the one returned never changes.
            return self._version, self._params

    def apply_update(self, delta: np.ndarray) -> int:
        with self._lock:
            self._params = self._params + delta
            self._version += 1
            version = self._version
        if self._checkpoint_every and version % self._checkpoint_every == 0:
            self.checkpoint()  # Outside the lock: readers are not held up by the write.
        return version


class Writer:
    """Moves the parameters by gradient steps on ``0.5 * |params - target|²``.

    Every replica gets the same update, so replicas stay identical.
    """

    def __init__(self, servers: list, size: int, interval_s: float = 0.01,
                 learning_rate: float = 0.01):
        self._servers, self._interval_s, self._learning_rate = servers, interval_s, learning_rate
        self._target = np.random.default_rng(1).standard_normal(size).astype(np.float32)

    def run(self) -> None:
        stop = lp.stop_event()
        while not stop.wait(self._interval_s):  # Pacing, not synchronization.
            current = results_or_none([self._servers[0].futures.get_params()], stop)
            if current is None:
                return
            delta = -self._learning_rate * (current[0][1] - self._target)
            if results_or_none([s.futures.apply_update(delta) for s in self._servers], stop) is None:
                return


class Requester:
    """Reads parameters in a loop when the meter asks it to measure."""

    def __init__(self, server, size: int):
        self._server, self._size = server, size

    def measure(self, duration_s: float) -> dict:
        queries, newest, start = 0, 0, time.monotonic()
        while (elapsed := time.monotonic() - start) < duration_s:
            version, params = self._server.get_params()
            if params.shape != (self._size,):
                raise ValueError(f'expected {self._size} parameters, got shape {params.shape}')
            newest = max(newest, version)
            queries += 1
        return {'queries': queries, 'seconds': elapsed, 'newest_version': newest}


def measure(requesters: list, duration_s: float, result_path: str | None = None) -> None:
    """The meter: asks every requester to measure at once, adds up, ends the program."""
    reports = results_or_none([r.futures.measure(duration_s) for r in requesters],
                              lp.stop_event())
    if reports is None:
        return
    result = {
        'num_requesters': len(requesters),
        'qps': sum(r['queries'] / r['seconds'] for r in reports),
        'queries': sum(r['queries'] for r in reports),
        'newest_version': max(r['newest_version'] for r in reports),
    }
    print(f'meter: {len(requesters)} requesters, {result["queries"]} queries, '
          f'{result["qps"]:.0f} queries/s in total; parameters at version '
          f'{result["newest_version"]}', flush=True)
    if result_path:
        with open(result_path, 'w') as f:
            json.dump(result, f)
    lp.stop()


def add_servers(program: lp.Program, replicas: int, param_size: int, *,
                checkpoint_every: int = 1000) -> list:
    """Adds the ``server`` group (``replicas`` ParamServers) and the writer; the servers' handles."""
    with program.group('server'):
        servers = [program.add_node(lp.CourierNode(ParamServer, param_size,
                                                   checkpoint_every=checkpoint_every))
                   for _ in range(replicas)]
    program.add_node(lp.PyClassNode(Writer, servers, param_size), label='writer')
    return servers


def make_program(topology: str = 'single', num_requesters: int = 4, *, num_servers: int = 2,
                 param_size: int = 10_000, duration_s: float = 2.0,
                 refresh_interval_ms: int = 50, result_path: str | None = None,
                 checkpoint_every: int = 1000) -> lp.Program:
    """Builds one topology; see the module docstring."""
    if topology not in TOPOLOGIES:
        raise ValueError(f'topology must be one of {TOPOLOGIES} (got {topology!r})')
    program = lp.Program(f'parameter_server_{topology}')
    servers = add_servers(program, num_servers if topology == 'replicated' else 1, param_size,
                          checkpoint_every=checkpoint_every)
    targets = servers
    if topology == 'cached':
        targets = [program.add_node(
            lp.CacherNode(servers[0], refresh_interval_ms=refresh_interval_ms,
                          stale_after_ms=10 * refresh_interval_ms, num_caches=1),
            label='cacher')]
    with program.group('requester'):
        requesters = [program.add_node(lp.CourierNode(Requester, targets[i % len(targets)],
                                                      param_size))
                      for i in range(num_requesters)]
    program.add_node(lp.PyNode(measure, requesters, duration_s, result_path), label='meter')
    return program
