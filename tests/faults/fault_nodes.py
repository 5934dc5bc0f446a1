"""The program every fault run launches: a parameter server behind a cache, and its actors.

    actor ×3 ──apply(actor, n)──▶ params ◀── cache ◀──get_params── actor
                                   ▲
    coordinator ──total()──────────┘   (ends the program once all updates are in)

``params`` applies each numbered update exactly once and keeps an
append-only log, so a restarted ``params`` recovers every update it
acknowledged; an actor retries an update until it is acknowledged and
records the acknowledgement in its ledger. The run's checks
(``fault_checks.py``) compare log and ledgers: an acknowledged update
missing from the log is lost, one logged twice is applied twice.
"""

from __future__ import annotations

import json
import os
import threading
import time

import numpy as np

import launchpad_py as lp
from launchpad_py import courier

SIZE = 64
ACTORS, UPDATES = 3, 250
PAUSE_S = 0.02  # Between an actor's updates: a run lasts about UPDATES * PAUSE_S seconds.
# What a call to a node that is restarting, paused or cut off fails with: retried.
_TRANSIENT = (courier.CourierUnavailableError, courier.CourierTimeoutError,
              courier.CourierCancelledError)


def delta(actor: int, number: int) -> np.ndarray:
    """Update ``number`` of ``actor``: known in advance, so the final parameters can be checked."""
    update = np.zeros(SIZE, np.int64)
    update[(7 * actor + number) % SIZE] = actor + 1 + number % 3
    return update


class Stopping(Exception):
    """The program stops while a call is being retried."""


def retry(call, stop: threading.Event):
    """``call()``, again after each transient failure, until it answers or the program stops."""
    while True:
        try:
            return call()
        except _TRANSIENT:
            if stop.wait(0.05):
                raise Stopping() from None


class DurableParams:
    """Parameters that apply each (actor, number) once, and survive restarts through a log."""

    def __init__(self, log_path: str):
        self._lock = threading.Lock()
        self._params = np.zeros(SIZE, np.int64)
        self._last: dict[int, int] = {}
        self._version = 0
        for actor, number in _read_log(log_path):
            self._apply(actor, number)
        self._log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def _apply(self, actor: int, number: int) -> None:
        self._params += delta(actor, number)
        self._last[actor] = number
        self._version += 1

    def apply(self, actor: int, number: int) -> bool:
        """Applies update ``number`` of ``actor``; False when it was applied before (a retry)."""
        with self._lock:
            last = self._last.get(actor, 0)
            if number <= last:
                return False
            if number != last + 1:
                raise ValueError(f'update {number} of actor {actor} follows {last}')
            os.write(self._log, f'{actor} {number}\n'.encode())  # Logged before acknowledged.
            self._apply(actor, number)
            return True

    def last_applied(self, actor: int) -> int:
        with self._lock:
            return self._last.get(actor, 0)

    def get_params(self) -> tuple[int, np.ndarray]:
        with self._lock:
            return self._version, self._params.copy()

    def total(self) -> int:
        with self._lock:
            return self._version

    def state(self) -> dict:
        with self._lock:
            return {'version': self._version, 'params': self._params.tolist()}


def _read_log(path: str) -> list[tuple[int, int]]:
    """The complete records of the log; a record cut short by a kill is dropped from the file."""
    if not os.path.exists(path):
        return []
    with open(path, 'rb') as log:
        data = log.read()
    whole = data[:data.rfind(b'\n') + 1]
    if len(whole) != len(data):
        with open(path, 'r+b') as log:
            log.truncate(len(whole))
    return [tuple(map(int, line.split())) for line in whole.decode().splitlines()]


class Actor:
    """Reads parameters through the cache; sends its numbered updates, each until acknowledged."""

    def __init__(self, params, cache, ledger_dir: str, updates: int, pause_s: float):
        self._params, self._cache = params, cache
        self._index = lp.get_node_context().index
        self._ledger = os.path.join(ledger_dir, f'acked-{self._index}')
        self._updates, self._pause_s = updates, pause_s

    def run(self) -> None:
        stop = lp.stop_event()
        try:
            number = retry(lambda: self._params.last_applied(self._index), stop) + 1
            newest = 0
            with open(self._ledger, 'a') as ledger:
                while number <= self._updates and not stop.is_set():
                    version, _ = retry(self._cache.get_params, stop)
                    if version < newest:
                        ledger.write(f'went-back {version} {newest}\n')
                    newest = max(newest, version)
                    retry(lambda: self._params.apply(self._index, number), stop)
                    ledger.write(f'{number}\n')
                    ledger.flush()
                    number += 1
                    stop.wait(self._pause_s)  # Pacing: the run lasts long enough to be hit.
        except Stopping:
            pass


def coordinate(params, actors: int, updates: int, result_path: str) -> None:
    """Ends the program once every update is applied, writing the final state first."""
    stop = lp.stop_event()
    try:
        while retry(params.total, stop) < actors * updates:
            if stop.wait(0.05):
                return
        state = retry(params.state, stop)
    except Stopping:
        return
    with open(result_path, 'w') as result:
        json.dump({'state': state, 'stop_requested_at': time.monotonic()}, result)
    lp.stop()


def make_program(run_dir: str, actors: int = ACTORS, updates: int = UPDATES,
                 pause_s: float = PAUSE_S) -> lp.Program:
    program = lp.Program('fault_run')
    timeouts = {'call_timeout': 10}  # A paused node answers late; none answers never.
    params = program.add_node(lp.CourierNode(
        DurableParams, os.path.join(run_dir, 'params.log'), courier_client_kwargs=timeouts),
        label='params')
    cache = program.add_node(lp.CacherNode(params, refresh_interval_ms=20, stale_after_ms=200,
                                           courier_client_kwargs=timeouts), label='cache')
    with program.group('actor'):
        for _ in range(actors):
            program.add_node(lp.PyClassNode(Actor, params, cache, run_dir, updates, pause_s))
    program.add_node(lp.PyNode(coordinate, params, actors, updates,
                               os.path.join(run_dir, 'result.json')), label='coordinator')
    return program


#: What each group does when its node fails; the coordinator keeps the default (stop).
POLICIES = {label: lp.Restart(max_restarts=100, backoff=(0.1, 1.0))
            for label in ('params', 'cache', 'actor')}
