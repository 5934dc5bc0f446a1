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
    """Keeps its server up after the stop until a stop handler has called it and released it."""

    def __init__(self):
        self._released = threading.Event()

    def work(self):
        time.sleep(0.3)  # Work in progress while the program stops.
        return 'done'

    def release(self):
        self._released.set()

    def run(self):
        lp.wait_for_stop()
        self._released.wait(30)


def call_in_stop_handler(worker, log_path: str) -> None:
    """A stop handler that calls a node which is still alive, then lets it end."""
    def handler():
        try:
            outcome = worker.work()
        except courier.CourierError as exc:
            outcome = f'{type(exc).__name__}: {exc}'
        _append(log_path, f'handler {outcome}')
        try:
            worker.release()
        except courier.CourierError:
            pass  # Its answer may race with its server's stop; only the release matters.

    lp.register_stop_handler(handler)
    lp.wait_for_stop()


def ignore_the_stop_until(release: threading.Event) -> None:
    """A node that ignores the stop; the test releases it once it has checked the report."""
    release.wait(60)
