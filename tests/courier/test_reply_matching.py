"""A futures connection's replies are matched to their calls by the reader, on both loops.

``frames.Reader.take_replies`` pops each reply's entry from the pending table (a plain
dict, no lock) and returns every small reply already received in one call (the compiled
loop's ``take_replies``); replies to calls no longer pending are dropped, and any other
frame is read by Python. ``tcp.Connection.peer_gone`` looks without raising on either loop
(the compiled peek, or a ``poll`` that does not wait).
"""

from __future__ import annotations

import os
import select
import socket
import struct
import threading

import numpy as np
import pytest
from frame_loops import loop  # noqa: F401 (the fixture)

from launchpad_py.courier import frames, serialization, shm
from launchpad_py.courier.transports import tcp


@pytest.fixture
def pair():
    """A connected socket pair: the writing end, and a reader on the other."""
    left, right = socket.socketpair()
    reader = frames.Reader(right, shm.ReleaseQueue(), scratch=4096, descriptors=False)
    yield left, reader
    left.close(), right.close()


def _reply(call_id: int, obj) -> bytes:
    parts, _ = frames.encode(call_id, frames.REPLY, obj)
    return b''.join(bytes(p) for p in parts)


def _values(replies) -> list[tuple]:
    return [(entry, serialization.decode(pickled, buffers)) for entry, pickled, buffers in replies]


def test_every_reply_received_is_taken_and_the_unknown_dropped(loop, pair):
    """Three replies in one write: the two pending calls get theirs, popped from the table;
    the reply to a call no longer pending (timed out) is dropped; others stay pending."""
    left, reader = pair
    left.sendall(_reply(1, ('ok', 'a')) + _reply(2, ('ok', 'late')) + _reply(3, ('ok', 'c')))
    pending = {1: 'first', 3: 'third', 9: 'waiting'}
    taken = _values(reader.take_replies(pending))
    assert taken == [('first', ('ok', 'a')), ('third', ('ok', 'c'))]
    assert pending == {9: 'waiting'}
    assert not reader.buffered


def test_a_reply_with_buffers_between_small_ones_is_read_by_python(loop, pair):
    """A reply carrying an array between two small ones: each comes out once, in order,
    whether the compiled loop stops before it or Python reads all three."""
    left, reader = pair
    array = np.arange(50_000, dtype=np.float32)
    parts, _ = frames.encode(2, frames.REPLY, ('ok', array))
    writer = threading.Thread(target=lambda: frames.send(
        left, [_reply(1, ('ok', 'a'))] + parts + [_reply(3, ('ok', 'b'))], None))
    writer.start()
    pending = {1: 'one', 2: 'two', 3: 'three'}
    taken = []
    try:
        while pending:
            taken += _values(reader.take_replies(pending))
    finally:
        writer.join(timeout=30)
    assert [entry for entry, _ in taken] == ['one', 'two', 'three']
    assert taken[0][1] == ('ok', 'a') and taken[2][1] == ('ok', 'b')
    np.testing.assert_array_equal(taken[1][1][1], array)


def test_the_end_of_the_stream_is_raised_once_nothing_is_left(loop, pair):
    """Replies received before the peer closed are still taken; then the end is raised."""
    left, reader = pair
    left.sendall(_reply(4, ('ok', 'last')))
    left.close()
    pending = {4: 'four'}
    assert _values(reader.take_replies(pending)) == [('four', ('ok', 'last'))]
    with pytest.raises(EOFError):
        reader.take_replies(pending)


def test_peer_gone_sees_a_closed_tcp_peer_without_blocking(loop):
    """An idle connection is not gone; once its peer closes, it is (either loop)."""
    left, right = socket.socketpair()
    connection = tcp.Connection(right)
    try:
        assert (connection.reader.loop is None) == (loop == 'pure')
        assert not connection.peer_gone()
        left.close()
        assert connection.peer_gone()
    finally:
        connection.close()


def test_a_reset_tcp_peer_and_unasked_bytes_make_a_connection_gone(loop):
    """A peer that reset the connection (close with zero linger), or bytes no server sends to an
    idle connection, make it gone on either loop, as a closed peer does; an idle one is not,
    at once, also when its socket has a timeout (the pure loop's former peek waited that
    timeout out, then said gone)."""
    listener = socket.create_server(('127.0.0.1', 0))
    try:
        for unasked in (False, True):
            caller = socket.create_connection(listener.getsockname(), timeout=10)
            server, _ = listener.accept()
            connection = tcp.Connection(caller)
            try:
                assert not connection.peer_gone()
                if unasked:  # The server stays: only its byte makes the connection unusable.
                    server.sendall(b'!')
                else:
                    server.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                      struct.pack('ii', 1, 0))
                    server.close()
                assert select.select([caller], [], [], 10)[0], 'nothing reached the caller'
                assert connection.peer_gone()
            finally:
                server.close()
                connection.close()
    finally:
        listener.close()


def test_a_closed_tcp_connection_is_gone_without_looking_at_its_descriptor(loop):
    """After ``close`` the connection says gone, even when its descriptor number was reused
    by an open socket whose peer is there (the compiled peek is bound to the number)."""
    left, right = socket.socketpair()
    connection = tcp.Connection(right)
    number = right.fileno()
    a, b = socket.socketpair()  # Made first: neither may take the number closed below.
    connection.close()
    os.dup2(b.fileno(), number)  # The number now names an open socket whose peer is there.
    try:
        assert connection.peer_gone()
    finally:
        os.close(number)
        for end in (left, a, b):
            end.close()


def test_a_reply_nobody_waits_for_is_dropped_without_waiting_for_more(loop, pair):
    """A reply to a call that timed out meanwhile is read and dropped, and the read returns
    (empty) instead of waiting for a reply that may never come: its caller looks again."""
    left, reader = pair
    reader._sock.settimeout(10)  # A read that waited would fail the test, not hang it.
    left.sendall(_reply(5, ('ok', 'too late')))
    assert reader.take_replies({}) == []
    assert not reader.buffered

