"""The server side of the same-host path (see ``uds.py``): the Unix-socket listener.

It binds the server's socket file, greets each caller with its port and network
namespace, and hands the connection to ``socket_serving`` (shared with raw TCP).

A listener removes its socket file when it stops, and at interpreter exit if
nobody stopped it; a process that is about to kill itself calls
``remove_socket_files`` first. Only a process killed from outside leaves a
socket behind, for ``uds.remove_stale_sockets`` to find.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import logging
import os
import socket
import time
from typing import Callable

from launchpad_py.courier import open_files, stats as stats_module
from launchpad_py.courier.transports import interface, uds
from launchpad_py.courier.transports.sockets import socket_serving

# Out of descriptors, accept() fails at once while clients wait: try again this much later.
_FULL_BACKOFF_S = 0.05
_log = logging.getLogger(__name__)


class LocalListener(socket_serving.SocketServing):
    """Accepts same-host connections for one server."""

    def __init__(self, port: int, dispatch: Callable, unsendable: Callable,
                 executor: concurrent.futures.Executor, label: str | None,
                 thread_initializer: Callable[[], None] | None = None, *,
                 stats: stats_module.ServerStats | None = None):
        super().__init__(f'courier-{label or "server"}-uds', dispatch, unsendable, executor,
                         thread_initializer, stats=stats)
        self._label = label or '(unlabelled)'
        self.port = port  # The server's address's port (its TCP port): it names the path.
        self.path = uds.socket_path(port)
        self._inode: int | None = None

    def bind(self) -> bool:
        """Binds the socket file; False when this host offers no private socket directory."""
        if self.path is None:
            return False
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with uds.directory_lock(os.path.dirname(self.path), exclusive=False):
            try:  # A socket left by a crashed server of the same port is stale: ours now.
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            try:
                listener.bind(self.path)
                listener.listen(128)
            except OSError:
                listener.close()
                return False
        self._listener = listener
        self._inode = os.stat(self.path).st_ino
        _listening.add(self)
        return True

    def start(self) -> None:
        self._accept_from_first_connection(self._accept_loop)

    def _accept_loop(self) -> None:
        told = False
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError as exc:
                if not open_files.is_exhausted(exc):
                    return  # The listener closed (stop).
                if not told:  # Waiting clients stay queued; we go on once descriptors free up.
                    _log.error('%s', open_files.exhausted(f'courier server {self._label} cannot '
                                                          'accept a same-host connection'))
                    told = True
                time.sleep(_FULL_BACKOFF_S)
                continue
            try:
                sock.sendall(uds.greeting(self.port))
            except OSError:
                sock.close()
                continue
            if not self._admit_connection(uds.Connection(sock)):
                return

    def _before_close(self) -> None:
        _listening.discard(self)
        self._remove_path()

    def _remove_path(self) -> None:
        """Unlinks the socket file unless another server has taken the path since."""
        try:
            if os.stat(self.path).st_ino == self._inode:
                os.unlink(self.path)
        except OSError:
            pass


_listening: set[LocalListener] = set()


def listen(serving: interface.Serving) -> LocalListener | None:
    """The Unix-socket listener of a server bound to loopback, if it can have one here."""
    if not serving.options.local_transport or uds.local_port(
            f'{serving.host}:{serving.port}') is None:
        return None
    listener = LocalListener(serving.port, serving.dispatch, serving.unsendable, serving.pool,
                             serving.label, serving.initializer, stats=serving.stats)
    return listener if listener.bind() else None


def remove_socket_files() -> None:
    """Unlinks this process's listening socket files: it is about to end without stopping them."""
    for listener in list(_listening):
        listener._remove_path()


atexit.register(remove_socket_files)
