"""The control channel's listener: authenticated, and not stalled by a silent peer."""

from __future__ import annotations

import multiprocessing.connection as mpc
import queue
import socket

from launchpad_py.node_side import control_channel


def test_silent_tcp_peer_does_not_hold_up_workers():
    """A TCP peer that connects and says nothing does not delay a worker's hello."""
    hellos: queue.Queue = queue.Queue()
    server = control_channel.ControlServer(('127.0.0.1', 0), lambda hello, channel: hellos.put(hello),
                                   family='AF_INET')
    try:
        with socket.create_connection(server.address, timeout=5):
            worker = mpc.Client(server.address, family='AF_INET', authkey=server.key)
            worker.send(('hello', 'w/0'))
            assert hellos.get(timeout=5) == ('hello', 'w/0')
            worker.close()
    finally:
        server.close()


def test_peer_without_the_key_is_refused():
    """A peer with the wrong key never reaches on_connect."""
    hellos: queue.Queue = queue.Queue()
    server = control_channel.ControlServer(('127.0.0.1', 0), lambda hello, channel: hellos.put(hello),
                                   family='AF_INET')
    try:
        try:
            impostor = mpc.Client(server.address, family='AF_INET', authkey=b'x' * 32)
            impostor.send(('hello', 'w/0'))
        except (mpc.AuthenticationError, OSError, EOFError):
            pass
        assert hellos.empty()
        worker = mpc.Client(server.address, family='AF_INET', authkey=server.key)
        worker.send(('hello', 'w/1'))
        assert hellos.get(timeout=5) == ('hello', 'w/1')
        worker.close()
    finally:
        server.close()
