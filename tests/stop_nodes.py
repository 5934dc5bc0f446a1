"""Nodes for test_stop.py; importable by node processes."""

from __future__ import annotations

import os
import threading
import time

import launchpad_py as lp
from launchpad_py import courier


def _append(path: str, line: str) -> None:
    with open(path, 'a') as log:
        log.write(line + '\n')


class Finishes:
    """A courier node whose run() returns at once: its server is gone while the program runs."""

    def ping(self):
        return 'pong'

    def run(self):
        pass


def call_after_go(server, go_path: str, log_path: str) -> None:
    """Once ``go_path`` exists, calls ``server`` twice, logging when and how each call ended."""
    pause = threading.Event()
    deadline = time.monotonic() + 60
    while not os.path.exists(go_path) and time.monotonic() < deadline:
        pause.wait(0.02)  # A file no event announces.
    _append(log_path, 'calling')
    for attempt in ('first', 'second'):
        started = time.time()
        try:
            server.ping()
            outcome = 'answered'
        except courier.CourierError as exc:
            outcome = type(exc).__name__
        _append(log_path, f'{attempt} {outcome} {started} {time.time()}')


class Worker:
    """Keeps its server up after the stop until the call it expects from a stop handler is done."""

    def __init__(self):
        self._done = threading.Event()

    def work(self):
        time.sleep(0.3)  # Work in progress while the program stops.
        self._done.set()
        return 'done'

    def run(self):
        lp.wait_for_stop()
        self._done.wait(30)


def call_in_stop_handler(worker, log_path: str) -> None:
    """A stop handler that calls a node which is still alive."""
    def handler():
        try:
            outcome = worker.work()
        except courier.CourierError as exc:
            outcome = f'{type(exc).__name__}: {exc}'
        _append(log_path, f'handler {outcome}')

    lp.register_stop_handler(handler)
    lp.wait_for_stop()
