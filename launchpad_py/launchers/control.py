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
channel works over TCP for launchers on other hosts.
"""

from __future__ import annotations

import logging
import multiprocessing.connection as mpc
import os
import secrets
import threading
from typing import Callable

from launchpad_py.node_process import Channel

_log = logging.getLogger(__name__)
KEY_ENV = 'LAUNCHPAD_PY_CONTROL_KEY'


class ControlServer:
    """Accepts worker connections and hands each to ``on_connect(worker_id, hello, channel)``."""

    def __init__(self, address: str, on_connect: Callable):
        self.key = secrets.token_bytes(32)
        self.address = address
        self._on_connect = on_connect
        self._listener = mpc.Listener(address, family='AF_UNIX', authkey=self.key)
        self._closed = False
        self._thread = threading.Thread(target=self._accept_loop, name='lp-control', daemon=True)
        self._thread.start()

    def _accept_loop(self) -> None:
        while True:
            try:
                connection = self._listener.accept()
            except (mpc.AuthenticationError, EOFError, ConnectionError) as exc:
                _log.warning('rejected a control connection: %s', exc)
                continue
            except OSError:
                return
            if self._closed:
                connection.close()
                return
            channel = Channel(connection)
            try:
                hello = channel.recv()
            except (EOFError, OSError):
                continue
            self._on_connect(hello, channel)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:  # Wake the accept loop with a connection of our own.
            mpc.Client(self.address, family='AF_UNIX', authkey=self.key).close()
        except OSError:
            pass
        self._thread.join(5)
        self._listener.close()


def connect_to_launcher(address: str) -> Channel:
    """Called in the worker; the key comes from the environment, never the command line."""
    key = bytes.fromhex(os.environ.pop(KEY_ENV))
    return Channel(mpc.Client(address, family='AF_UNIX', authkey=key))
