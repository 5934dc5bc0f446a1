"""Nodes of the scale tests and of bench/scale.py: many counters, one caller."""

from __future__ import annotations

import os

import launchpad_py as lp


class Counter:
    """A server with one counter."""

    def __init__(self):
        self.value = 0

    def add(self, n):
        self.value += n
        return self.value


def add_one_to_each_then_stop(counters, answers_path=None):
    """Calls ``add(1)`` on every counter at once, checks each answered 1, stops the program."""
    futures = [counter.futures.add(1) for counter in counters]
    answers = [future.result(timeout=120) for future in futures]
    if answers_path is not None:
        # On a host that shares nothing with the launcher the test's directory is not there.
        os.makedirs(os.path.dirname(answers_path), exist_ok=True)
        with open(answers_path, 'w') as answers_file:
            answers_file.write(f'{sum(1 for a in answers if a == 1)}\n')
    lp.stop()


def fan_out_program(nodes: int, answers_path: str | None = None) -> lp.Program:
    """``nodes`` CourierNode(Counter) in one group and one PyNode calling each once."""
    program = lp.Program(f'fan_out_{nodes}')
    with program.group('counter'):
        counters = [program.add_node(lp.CourierNode(Counter)) for _ in range(nodes)]
    program.add_node(lp.PyNode(add_one_to_each_then_stop, counters, answers_path), label='caller')
    return program


def count_known_addresses(clients, path):
    """Calls each client once, then writes how many addresses this process knows."""
    from launchpad_py.program import address
    assert all(client.add(1) == 1 for client in clients)
    with open(path, 'w') as known:
        known.write(str(len(address.directory)))
    lp.stop()
