"""The control channel between a launcher and its worker processes.

A launcher that starts a worker itself hands it one end of a socket pair;
a worker it cannot hand a socket (a tmux window) connects back to the
launcher's ``ControlServer`` (authenticated with a per-program secret).
Either way they exchange small messages::

    worker → launcher: ('hello', worker_id, pid, pgid), ('ready',), ('stop_program',),
                       ('failed', summary, traceback, exception_bytes), ('finished',)
    launcher → worker: ('stop',)

The worker treats the end of this connection as the launcher's death and
kills its own process group, so no node outlives its launcher. The same
channel works over TCP (``family='AF_INET'``) for nodes on other hosts
(see ``launchers/remote/``).
"""

from __future__ import annotations

import logging
import multiprocessing.connection as mpc
import os
import secrets
import socket
import struct
import threading
from typing import Callable

from launchpad_py.node_side.node_process import Channel

_log = logging.getLogger(__name__)
KEY_ENV = 'LAUNCHPAD_PY_CONTROL_KEY'
#: A peer has this long to prove the key and say hello.
HANDSHAKE_TIMEOUT_S = 10.0


class ControlServer:
    """Accepts worker connections and hands each to ``on_connect(worker_id, hello, channel)``."""

    def __init__(self, address, on_connect: Callable, family: str = 'AF_UNIX',
                 key: bytes | None = None):
        # ``key``: one the peers already hold (a submitted program's secret); else a fresh one.
        self.key = key or secrets.token_bytes(32)
        self._family = family
        self._on_connect = on_connect
        # The key is checked per connection in a thread of its own (see _admit), so a peer
        # that connects and says nothing cannot stall the accept loop.
        # A deep backlog: a thousand nodes may dial in within a second.
        self._listener = mpc.Listener(address, family=family, backlog=4096)
        #: A Unix path, or (host, port) with the port the listener got (family='AF_INET').
        self.address = self._listener.address
        self._closed = False
        self._thread = threading.Thread(target=self._accept_loop, name='lp-control', daemon=True)
        self._thread.start()

    def _accept_loop(self) -> None:
        while True:
            try:
                connection = self._listener.accept()
            except OSError:
                return
            if self._closed:
                connection.close()
                return
            threading.Thread(target=self._admit, args=(connection,), name='lp-control-admit',
                             daemon=True).start()

    def _admit(self, connection: mpc.Connection) -> None:
        """Both sides prove the key, then the worker says hello; all within HANDSHAKE_TIMEOUT_S."""
        _set_receive_timeout(connection, HANDSHAKE_TIMEOUT_S)
        try:
            mpc.deliver_challenge(connection, self.key)
            mpc.answer_challenge(connection, self.key)
            hello = connection.recv()
        except (mpc.AuthenticationError, EOFError, OSError) as exc:
            _log.warning('rejected a control connection: %s', exc or type(exc).__name__)
            connection.close()
            return
        _set_receive_timeout(connection, 0)
        self._on_connect(hello, Channel(connection))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:  # Wake the accept loop with a connection of our own.
            mpc.Client(self.address, family=self._family).close()
        except OSError:
            pass
        self._thread.join(5)
        self._listener.close()


def hand_to_workers(workers: dict, fields: int) -> Callable:
    """An ``on_connect`` that gives each channel to the worker its hello names.

    A hello is ``('hello', worker_id, ...)`` with ``fields`` items; the
    worker's ``on_connect(*hello[2:], channel)`` then runs on a thread of its
    own for as long as the node lives. A hello naming no worker of ours
    closes the channel.
    """

    def on_connect(hello, channel: Channel) -> None:
        if not (isinstance(hello, tuple) and len(hello) == fields and hello[0] == 'hello'
                and hello[1] in workers):
            channel.close()
            return
        worker = workers[hello[1]]
        threading.Thread(target=worker.on_connect, args=(*hello[2:], channel),
                         name=f'lp-channel-{worker.name}', daemon=True).start()

    return on_connect


def _set_receive_timeout(connection: mpc.Connection, seconds: float) -> None:
    """Reads on ``connection`` fail after ``seconds`` (0: wait forever)."""
    sock = socket.socket(fileno=os.dup(connection.fileno()))
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                        struct.pack('ll', int(seconds), int(seconds % 1 * 1e6)))
    finally:
        sock.close()


def connect_to_launcher(address: str) -> Channel:
    """Called in the worker; the key comes from the environment, never the command line."""
    key = bytes.fromhex(os.environ.pop(KEY_ENV))
    return Channel(mpc.Client(address, family='AF_UNIX', authkey=key))
