"""The programs bench/scale.py launches (importable by node processes)."""

from __future__ import annotations

import json
import threading
import time

import launchpad_py as lp


class Counter:
    """One counter; ``add`` also notes when calls arrived, for the fan-in rate."""

    def __init__(self):
        self.count = 0
        self.first: float | None = None
        self.last: float | None = None
        self._changed = threading.Condition()

    def add(self, n):
        with self._changed:
            now = time.monotonic()
            self.first = self.first or now
            self.count, self.last = self.count + n, now
            self._changed.notify_all()
            return self.count

    def wait_count(self, total, timeout):
        """(count, calls/s between the first and the last call) once ``total`` calls arrived."""
        with self._changed:
            self._changed.wait_for(lambda: self.count >= total, timeout)
            span = (self.last or 0) - (self.first or 0)
            return self.count, (self.count / span if span > 0 else None)


def call_each_once_then_stop(counters, result_path):
    """One ``futures.add(1)`` to every counter at once; writes the rate; stops the program."""
    start = time.perf_counter()
    futures = [counter.futures.add(1) for counter in counters]
    answered = sum(1 for future in futures if future.result(timeout=300) == 1)
    seconds = time.perf_counter() - start
    with open(result_path, 'w') as result:
        json.dump({'answered': answered, 'calls_per_s': len(futures) / seconds,
                   'stop_requested_at': time.time()}, result)
    lp.stop()


def call_server(server, calls):
    """``calls`` sync calls to one server, then the node ends."""
    for _ in range(calls):
        server.add(1)


def fan_out(nodes: int, result_path: str) -> lp.Program:
    """The program of issue 25: N counters, one caller that calls each once and stops."""
    program = lp.Program(f'fan_out_{nodes}')
    with program.group('counter'):
        counters = [program.add_node(lp.CourierNode(Counter)) for _ in range(nodes)]
    program.add_node(lp.PyNode(call_each_once_then_stop, counters, result_path), label='caller')
    return program


def fan_in(nodes: int, calls: int) -> tuple[lp.Program, lp.CourierHandle]:
    """One counter, N client nodes making ``calls`` calls each."""
    program = lp.Program(f'fan_in_{nodes}')
    server = program.add_node(lp.CourierNode(Counter), label='server')
    with program.group('client'):
        for _ in range(nodes):
            program.add_node(lp.PyNode(call_server, server, calls))
    return program, server
