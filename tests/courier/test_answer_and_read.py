"""A server's reader sends a reply and reads the next request in one step
(``frames.Reader.answer_and_read``: ``_cframes.answer_small`` on the compiled loop, a send
without the connection's ``Outbox`` then a read on the pure one): the bytes that leave and
the frames that come back are those of a send followed by a read, however the request
arrives, on either loop."""

from __future__ import annotations

import array
import os
import socket
import threading

import pytest

from launchpad_py.courier import frame_loop, frames, shm


@pytest.fixture(params=[(True, 'compiled'), (False, 'compiled'), (True, 'pure'), (False, 'pure')],
                ids=['unix-descriptors', 'plain', 'unix-descriptors-pure', 'plain-pure'])
def pair(request, monkeypatch):
    """A connected pair: ``left`` plays the caller, ``reader`` reads ``right`` on the loop."""
    descriptors, loop = request.param
    if loop == 'pure':
        monkeypatch.setenv(frame_loop.PURE_ENV, '1')
    else:
        monkeypatch.delenv(frame_loop.PURE_ENV, raising=False)
        assert frame_loop.compiled() is not None, 'the compiled loop is not built (pip install -e .)'
    left, right = socket.socketpair()
    left.settimeout(10)  # The caller's waits for a reply are bounded: a missing one fails.
    reader = frames.Reader(right, shm.ReleaseQueue(), scratch=4096, descriptors=descriptors)
    assert (reader.loop is None) == (loop == 'pure') and reader.answers
    yield left, right, reader
    left.close(), right.close()
    reader.close()


def _frame(call_id: int, kind: int, obj) -> bytes:
    parts, fd = frames.encode(call_id, kind, obj)
    assert fd is None and len(parts) == 1
    return parts[0]


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b''
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, 'the stream ended early'
        data += chunk
    return data


def test_the_reply_leaves_and_the_next_request_is_read_however_it_arrives(pair):
    """Already buffered, arriving after the reply, or in pieces across the header: the reply's
    bytes are ``send_small``'s, and the next request reads whole."""
    left, _, reader = pair
    reply = _frame(0, frames.REPLY, ('ok', 'x' * 50))
    pickled = frames.from_bytes(reply).pickled.tobytes()
    left.sendall(_frame(1, frames.REQUEST, 'a') + _frame(2, frames.REQUEST, 'b'))
    assert reader.read().value() == 'a'  # 'b' is buffered now.
    frame = reader.answer_and_read(1, frames.REPLY, pickled)
    assert (frame.call_id, frame.value()) == (2, 'b')
    assert _recv_exactly(left, len(reply)) == _frame(1, frames.REPLY, ('ok', 'x' * 50))
    request = _frame(3, frames.REQUEST, 'c' * 200)
    for cut in (len(request), 5, 41):
        sender = threading.Thread(target=lambda: (_recv_exactly(left, len(reply)),
                                                  left.sendall(request[:cut]),
                                                  left.sendall(request[cut:])))
        sender.start()
        frame = reader.answer_and_read(2, frames.REPLY, pickled)
        sender.join(10)
        assert (frame.call_id, frame.kind, frame.value()) == (3, frames.REQUEST, 'c' * 200)


def test_a_request_with_buffers_after_the_reply_is_read_in_python(pair):
    """A next frame the compiled loop does not take (it carries a buffer) is read whole."""
    left, _, reader = pair
    big = bytearray(b'y' * (1 << 20))
    parts, _ = frames.encode(4, frames.REQUEST, [memoryview(big)])
    sender = threading.Thread(target=left.sendall, args=(b''.join(bytes(p) for p in parts),))
    sender.start()  # More than the socket holds: it leaves while the reader reads.
    frame = reader.answer_and_read(3, frames.REPLY, b'\x80\x05N.')
    sender.join(10)
    assert frame.call_id == 4 and bytes(frame.value()[0]) == bytes(big)


def test_a_descriptor_with_the_next_request_is_kept(pair):
    """A descriptor passed with the request read in the same step reaches the reader."""
    left, _, reader = pair
    if not reader._descriptors:
        return  # Descriptors ride only on a reader that receives them (the Unix path).
    read_end, write_end = os.pipe()
    try:
        left.sendmsg([_frame(5, frames.REQUEST, 'd')],
                     [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', [write_end]))])
        frame = reader.answer_and_read(4, frames.REPLY, b'\x80\x05N.')
        assert frame.value() == 'd' and len(reader._fds) == 1
        os.write(reader._fds[0], b'!')
        assert os.read(read_end, 1) == b'!'
    finally:
        os.close(read_end), os.close(write_end)


def test_the_end_of_the_stream_after_the_reply_is_seen(pair):
    """The caller that leaves after its last reply ends the reader's loop with EOFError."""
    left, _, reader = pair
    left.shutdown(socket.SHUT_WR)
    with pytest.raises(EOFError):
        reader.answer_and_read(6, frames.REPLY, b'\x80\x05N.')
    assert len(_recv_exactly(left, frames.HEADER.size + 4)) == frames.HEADER.size + 4


def test_a_reply_to_a_caller_gone_raises(pair):
    """A reply that cannot leave (the caller closed) raises OSError, ending the loop."""
    left, _, reader = pair
    left.close()
    with pytest.raises(OSError):
        reader.answer_and_read(7, frames.REPLY, b'\x80\x05N.')


# -- the races named in issue 29's notes of stop 38 ------------------------------------------

# System call numbers by machine, to see that a thread waits in the call meant (not the GIL).
# (sendto: the pure loop's ``sendall``; sendmsg: the compiled loop's).
_SYSCALLS = {'x86_64': {'recv': {45, 47}, 'send': {44, 46}},
             'aarch64': {'recv': {207, 212}, 'send': {206, 211}}}


def _blocked_in(thread: threading.Thread, which: str, timeout: float = 10.0) -> None:
    """Waits (bounded) until ``thread`` sits in a receive or a send system call."""
    numbers = _SYSCALLS.get(os.uname().machine)
    if numbers is None:
        pytest.skip(f'no system call numbers for {os.uname().machine}')
    path = f'/proc/self/task/{thread.native_id}/syscall'
    waited = threading.Event()
    for _ in range(int(timeout / 0.001)):
        with open(path) as f:
            number = f.read().split()[0]  # 'running' while on a CPU.
            if number.isdigit() and int(number) in numbers[which]:
                return
        waited.wait(0.001)  # A poll of the kernel's state, not a guess at how long it takes.
    raise AssertionError(f'the reader never blocked in {which}')


def _in_thread(fn, *args):
    """Runs ``fn(*args)`` on a thread; returns the thread and where its result will be."""
    out: dict = {}

    def run():
        try:
            out['value'] = fn(*args)
        except BaseException as exc:  # The test asserts on it.
            out['error'] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def test_a_request_larger_than_the_scratch_buffer_is_read_whole(pair):
    """A next request without buffers but longer than the scratch buffer (part of it received
    with the previous request) is left to Python's read and arrives whole."""
    left, _, reader = pair
    request = _frame(9, frames.REQUEST, 'z' * 20000)
    left.sendall(_frame(8, frames.REQUEST, 'a') + request[:100])
    assert reader.read().value() == 'a'
    thread, out = _in_thread(reader.answer_and_read, 8, frames.REPLY, b'\x80\x05N.')
    assert len(_recv_exactly(left, frames.HEADER.size + 4)) == frames.HEADER.size + 4
    left.sendall(request[100:])
    thread.join(10)
    assert out['value'].call_id == 9 and out['value'].value() == 'z' * 20000


def test_a_signal_while_the_next_request_is_awaited_is_not_an_error(pair):
    """A signal that interrupts the receive after the reply (EINTR) leaves the read waiting."""
    import signal
    left, _, reader = pair
    seen = []
    previous = signal.signal(signal.SIGUSR1, lambda *_: seen.append(1))
    try:
        thread, out = _in_thread(reader.answer_and_read, 10, frames.REPLY, b'\x80\x05N.')
        _recv_exactly(left, frames.HEADER.size + 4)
        _blocked_in(thread, 'recv')
        signal.pthread_kill(thread.ident, signal.SIGUSR1)
        left.sendall(_frame(11, frames.REQUEST, 'after the signal'))
        thread.join(10)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert 'error' not in out, out
    assert seen, 'the signal was not delivered'
    assert (out['value'].call_id, out['value'].value()) == (11, 'after the signal')


def test_a_signal_while_a_long_reply_is_sent_leaves_it_whole(pair):
    """A reply that fills the socket, its send interrupted by a signal, arrives intact."""
    import signal
    left, right, reader = pair
    right.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    left.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    pickled = bytes(range(256)) * 8192  # 2 MiB: far more than both buffers hold.
    previous = signal.signal(signal.SIGUSR1, lambda *_: None)
    try:
        thread, out = _in_thread(reader.answer_and_read, 12, frames.REPLY, pickled)
        _blocked_in(thread, 'send')
        signal.pthread_kill(thread.ident, signal.SIGUSR1)
        got = _recv_exactly(left, frames.HEADER.size + len(pickled))
        left.sendall(_frame(13, frames.REQUEST, 'next'))
        thread.join(10)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert 'error' not in out, out
    assert got[frames.HEADER.size:] == pickled and frames.from_bytes(got).call_id == 12
    assert out['value'].value() == 'next'


def test_a_stop_while_the_reader_waits_after_its_reply_ends_the_read(pair):
    """The server's stop shuts its connections (it does not close them under a reader, whose
    descriptor could then be reused): a reader waiting in the compiled step ends with EOF."""
    left, right, reader = pair
    thread, out = _in_thread(reader.answer_and_read, 14, frames.REPLY, b'\x80\x05N.')
    _recv_exactly(left, frames.HEADER.size + 4)
    _blocked_in(thread, 'recv')
    right.shutdown(socket.SHUT_RDWR)  # What SocketServing.stop does to each connection.
    thread.join(10)
    assert not thread.is_alive() and isinstance(out.get('error'), EOFError), out
