"""Replies to requests that arrive together leave together, and none waits behind a slow call.

A futures connection's reader runs the calls it has already received one after
another; the reply of each but the last is held back and all leave in one
write, so the caller wakes once for the batch instead of once per reply.
"""

from __future__ import annotations

import threading

import pytest

from launchpad_py import courier
from launchpad_py.courier import frame_loop, frames
from launchpad_py.courier.transports import uds
from launchpad_py.courier.transports.sockets import socket_serving


class Service:
    def __init__(self):
        self.opened = threading.Event()

    def echo(self, value):
        return value

    def wait_open(self) -> bool:
        return self.opened.wait(timeout=30)


@pytest.fixture
def served():
    """A Service served in this process, and a raw same-host connection to it."""
    service = Service()
    with courier.Server(service) as server:
        connection = uds.connect(uds.local_port(server.address))
        assert connection is not None, 'no same-host socket here'
        connection.sock.settimeout(30)
        try:
            yield service, connection
        finally:
            service.opened.set()
            connection.close()


def _burst(connection, requests) -> None:
    """Sends the futures requests ``requests`` (call ids from 1) in one write."""
    for call_id, request in enumerate(requests, 1):
        connection.send(call_id, socket_serving.FUTURE_REQUEST, request,
                        hold=call_id < len(requests))


def _reply(connection) -> tuple[int, object]:
    frame = connection.read()
    return frame.call_id, frame.value()


def test_replies_to_a_burst_leave_in_fewer_writes_than_calls(served, monkeypatch):
    """16 requests received in one read are answered in fewer writes than 16 (one, unless
    the machine preempted the reader long enough for the watchdog to step in)."""
    _, connection = served
    writes = []
    # Each write counted once: Python's (frames.send, frames.send_small without a compiled
    # loop) and the compiled loop's one-frame sendmsg, which an outbox calls directly.
    targets = [(frames, 'send', False), (frames, 'send_small', True)]
    if frame_loop.compiled() is not None:
        targets.append((frame_loop.compiled(), 'send_small', False))
    for owner, name, unless_compiled in targets:
        original = getattr(owner, name)

        def counted(*args, _original=original, _unless=unless_compiled, **kwargs):
            if not (_unless and args[1] is not None):  # frames.send_small(sock, loop, ...)
                writes.append(threading.current_thread().name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)
    _burst(connection, [('echo', (i,), {}) for i in range(16)])
    replies = dict(_reply(connection) for _ in range(16))
    assert replies == {i + 1: ('ok', i) for i in range(16)}
    # By thread: the server's first reply may be written before this thread looks.
    sent_by_us = writes.count(threading.current_thread().name)
    assert sent_by_us == 1
    assert 1 <= len(writes) - sent_by_us < 16


def test_a_held_reply_is_not_kept_behind_a_call_that_blocks(served):
    """A quick call's reply, held for the next call's, arrives while that call still blocks."""
    service, connection = served
    _burst(connection, [('echo', ('quick',), {}), ('wait_open', (), {})])
    assert _reply(connection) == (1, ('ok', 'quick'))
    assert not service.opened.is_set()
    service.opened.set()
    assert _reply(connection) == (2, ('ok', True))
