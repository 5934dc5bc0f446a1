"""Asking a node process for its counters over its control channel.

A worker that reads a control channel owns one ``MetricsProbe``: ``ask`` sends
``('metrics', id)`` and returns a future; the worker's reader hands each
``('metrics', id, counters)`` reply to ``answer``. Unanswered futures fail when
the channel closes, so nobody waits for a node that is gone.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import threading


class MetricsProbe:
    def __init__(self) -> None:
        self._ids = itertools.count()
        self._pending: dict[int, concurrent.futures.Future] = {}
        self._lock = threading.Lock()
        self._closed = False

    def ask(self, channel) -> concurrent.futures.Future:
        """The node's answer to come; already failed when ``channel`` is None or gone."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        request_id = next(self._ids)
        with self._lock:
            if channel is None or self._closed:
                future.set_exception(ConnectionError('the node has no open control channel'))
                return future
            self._pending[request_id] = future
        if not channel.send('metrics', request_id):
            self._fail(request_id)
        return future

    def answer(self, message: tuple) -> None:
        """Called by the channel's reader with a ``('metrics', id, counters)`` message."""
        _, request_id, counters = message
        with self._lock:
            future = self._pending.pop(request_id, None)
        if future is not None:
            future.set_result(counters)

    def close(self) -> None:
        """The channel ended: every question still open fails."""
        with self._lock:
            self._closed = True
            pending, self._pending = list(self._pending.values()), {}
        for future in pending:
            future.set_exception(ConnectionError('the node closed its control channel'))

    def _fail(self, request_id: int) -> None:
        with self._lock:
            future = self._pending.pop(request_id, None)
        if future is not None:
            future.set_exception(ConnectionError('the node closed its control channel'))
