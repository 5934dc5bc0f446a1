"""Node classes and functions for the tests of caching, colocation, resources and node context.

Importable from node processes (and colocation children), unlike classes
defined inside test functions.
"""

from __future__ import annotations

import collections
import os
import threading
import time

import launchpad_py as lp


class CountingUpstream:
    """Counts calls per key; ``value`` can be held at a gate to make fetches slow on demand."""

    def __init__(self):
        self._counts = collections.Counter()
        self._lock = threading.Lock()
        self._gate = threading.Event()
        self._gate.set()

    def value(self, key):
        """(how many times key was asked, server clock when asked)."""
        with self._lock:
            self._counts[key] += 1
            count = self._counts[key]
        asked_at = time.monotonic()
        self._gate.wait(60)
        return count, asked_at

    def fail_first(self, key):
        with self._lock:
            self._counts[key] += 1
            count = self._counts[key]
        if count == 1:
            raise KeyError(f'first call for {key} fails')
        return count

    def calls(self, key):
        with self._lock:
            return self._counts[key]

    def close_gate(self):
        self._gate.clear()

    def open_gate(self):
        self._gate.set()


class ContextReporter:
    """Tells who it is and what it sees of its environment."""

    def context(self):
        node = lp.get_node_context()
        return node.label, node.index

    def context_from_side_thread(self):
        box = []
        thread = threading.Thread(target=lambda: box.append(lp.get_node_context()))
        thread.start()
        thread.join(30)
        return box[0].label, box[0].index

    def env(self, names):
        return {name: os.environ.get(name) for name in names}

    def pid(self):
        return os.getpid()


def crash_until(path, failures):
    """Fails on each of its first ``failures`` runs (counted in ``path``), then waits for stop."""
    with open(path, 'a') as f:
        f.write('run\n')
    runs = count_runs(path)
    if runs <= failures:
        raise RuntimeError(f'planned failure {runs} of {failures}')
    lp.wait_for_stop()


def return_at_once():
    return None


def stop_after_calling(handle):
    """Calls a colocated sibling through its handle, then stops the program."""
    assert handle.ping('sibling') == ('pong', 'sibling')
    lp.stop()


def count_runs(path):
    with open(path) as f:
        return len(f.read().splitlines())


def stop_after_runs(paths, runs):
    """Stops the program once every file in ``paths`` counts ``runs`` runs."""
    while not all(os.path.exists(p) and count_runs(p) == runs for p in paths):
        if lp.wait_for_stop(timeout=0.05):
            return
    lp.stop()


def reporter_program(name, groups):
    """A program with ``groups[g]`` ContextReporter nodes in each group ``g``, and their handles."""
    program = lp.Program(name)
    handles = {}
    for group, count in groups.items():
        with program.group(group):
            handles[group] = [program.add_node(lp.CourierNode(ContextReporter))
                              for _ in range(count)]
    return program, handles
