"""The soak program: 1,000 futures kept in flight against a steady node and a restarting one.

    load ──900 in flight──▶ steady
      └───100 in flight──▶ flaky   (SIGKILLed every so often by the soak; lp.Restart)

``load`` starts a new call as each one ends, counts the answers, and files
each failure under its target and kind with the moment it happened, so the
soak can tell failures it caused (calls to ``flaky`` lost with it) from any
other. It rewrites ``load.json`` every few seconds and once more at the end.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import threading
import time

import launchpad_py as lp

IN_FLIGHT = {'steady': 900, 'flaky': 100}
REPORT_EVERY_S = 5.0


class Echo:
    def work(self, value: int) -> int:
        return value + 1


class Load:
    """Keeps ``IN_FLIGHT`` calls running; reports to ``path``."""

    def __init__(self, steady, flaky, path: str):
        self._clients = {'steady': steady, 'flaky': flaky}
        self._path = path
        self._lock = threading.Lock()
        self._answers = collections.Counter()
        self._failures: list[tuple[float, str, str]] = []  # (when, target, error type)
        self._wrong = 0
        self._ended_calls: queue.Queue = queue.Queue()  # (target, value): start the next one

    def _issue(self, target: str, value: int) -> None:
        future = self._clients[target].futures.work(value)
        future.add_done_callback(lambda done: self._ended(target, value, done))

    def _ended(self, target: str, value: int, future) -> None:
        error = future.exception()
        with self._lock:
            if error is not None:
                self._failures.append((time.monotonic(), target, type(error).__name__))
            elif future.result() != value + 1:
                self._wrong += 1
            else:
                self._answers[target] += 1
        self._ended_calls.put((target, value))

    def run(self) -> None:
        """One call ends, the next starts (on this thread: a call that fails at once must
        not start the next one inside its own callback), so the count in flight stays."""
        for target, count in IN_FLIGHT.items():
            for value in range(count):
                self._issue(target, value)
        stop, report_at = lp.stop_event(), time.monotonic() + REPORT_EVERY_S
        while not stop.is_set():
            try:
                target, value = self._ended_calls.get(timeout=0.5)
                self._issue(target, value + 1)
            except queue.Empty:
                pass
            if time.monotonic() >= report_at:
                self._report()
                report_at += REPORT_EVERY_S
        self._report()

    def _report(self) -> None:
        with self._lock:
            report = {'answers': dict(self._answers), 'failures': list(self._failures),
                      'wrong': self._wrong, 'at': time.monotonic()}
        with open(self._path + '.new', 'w') as f:
            json.dump(report, f)
        os.replace(self._path + '.new', self._path)


def make_program(run_dir: str) -> lp.Program:
    program = lp.Program('soak')
    steady = program.add_node(lp.CourierNode(Echo), label='steady')
    flaky = program.add_node(lp.CourierNode(Echo), label='flaky')
    program.add_node(lp.PyClassNode(Load, steady, flaky, os.path.join(run_dir, 'load.json')),
                     label='load')
    return program


POLICIES = {'flaky': lp.Restart(max_restarts=1000, backoff=(0.2, 2.0))}
