"""The server side of the same-host path (see ``uds.py``).

Each connection has a reader thread, which runs the calls it reads itself (no
thread hand-off, which is most of a tiny call's cost). A connection opened for
synchronous calls carries one call at a time. Calls on a futures connection
must run concurrently, so a watchdog gives the reading role to a new thread
when a call keeps its reader too long, and the connection's calls go to the
server's thread pool while that call runs (see ``inline.py``). Either way the server's
``thread_pool_size`` bounds how many calls run at once (``dispatch`` takes
the permit).

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
import threading
import time
from typing import Callable

from launchpad_py.courier import frames, inline, open_files, stats as stats_module, uds

SYNC_REQUEST, FUTURE_REQUEST = 1, 3
# Out of descriptors, accept() fails at once while clients wait: try again this much later.
_FULL_BACKOFF_S = 0.05
_log = logging.getLogger(__name__)


class LocalListener:
    """Accepts same-host connections for one server."""

    def __init__(self, port: int, dispatch: Callable, unsendable: Callable,
                 executor: concurrent.futures.Executor, label: str | None,
                 thread_initializer: Callable[[], None] | None = None, *,
                 stats: stats_module.ServerStats | None = None):
        self._port = port
        self._stats = stats  # The server's counters: calls and reply bytes are counted here.
        # Small calls are answered on the connection's own thread, which must be
        # set up like the executor's threads.
        self._thread_initializer = thread_initializer
        self._dispatch = dispatch
        self._unsendable = unsendable
        self._executor = executor
        self._name = f'courier-{label or "server"}-uds'
        self._label = label or '(unlabelled)'
        self._connections: set[uds.Connection] = set()
        self._watchdog = inline.Watchdog(self._promote, f'{self._name}-watchdog')
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False
        self.path = uds.socket_path(port)
        self._listener: socket.socket | None = None
        self._inode: int | None = None

    def start(self) -> bool:
        """Starts listening; False when this host offers no private socket directory."""
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
        self._spawn(self._accept_loop)
        return True

    def _spawn(self, target, *args) -> None:
        def run() -> None:
            if self._thread_initializer is not None:
                self._thread_initializer()
            target(*args)

        thread = threading.Thread(target=run, name=self._name, daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

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
                sock.sendall(uds.greeting(self._port))
            except OSError:
                sock.close()
                continue
            if not self._admit_connection(uds.Connection(sock)):
                return

    def _admit_connection(self, connection: uds.Connection, peer=None) -> bool:
        """Starts serving ``connection``; False once the listener is closed."""
        turn = inline.Turn(connection, peer)
        turn.reader = token = object()
        with self._lock:
            if self._closed:
                connection.close()
                return False
            self._connections.add(connection)
        self._watchdog.add(turn)
        self._spawn(self._serve, turn, token)
        return True

    def _promote(self, turn: inline.Turn, token: object) -> None:
        """The watchdog's hand-over: a new thread reads for ``turn`` (after a stop, it finds
        the connection shut and closes it)."""
        self._spawn(self._serve, turn, token)

    def _serve(self, turn: inline.Turn, token: object) -> None:
        """Reads and runs calls until the peer goes, or another reader takes over."""
        ended = self._read_calls(turn, token)
        if ended is None:
            return  # Demoted: the new reader owns the connection now.
        self._farewell(turn, ended)
        self._watchdog.discard(turn)
        with self._lock:
            self._connections.discard(turn.connection)
        turn.connection.close()

    def _read_calls(self, turn: inline.Turn, token: object) -> BaseException | None:
        """The reader's loop; returns why it ended, None when it lost the reading role."""
        connection, shard, watchdog = turn.connection, self._own_shard(), self._watchdog
        try:
            while True:  # No local keeps a frame: its shared memory is released sooner.
                frame = connection.read()
                if frame.kind == SYNC_REQUEST:
                    self._answer(connection, frame, shard)
                elif turn.detours:  # A call here blocked lately: the pool runs the next.
                    self._executor.submit(self._answer, connection, frame)
                else:
                    watchdog.begin(turn, frame)
                    self._answer(connection, frame, shard)
                    if not turn.finish(token):
                        return None
        except Exception as exc:  # Peer gone, a bad frame, or the pool shut down on stop.
            return exc

    def _farewell(self, turn: inline.Turn, ended: BaseException) -> None:
        """Says why a connection ended, where that is news (see ``tcp.py``)."""

    def _own_shard(self) -> stats_module.Shard | None:
        """The counters of the calling thread, which it then writes alone."""
        return None if self._stats is None else self._stats.shard()

    def _answer(self, connection: uds.Connection, frame: frames.Frame,
                shard: stats_module.Shard | None = None) -> None:
        if shard is None:  # On a pool thread.
            shard = self._own_shard()
        reply = self._dispatch(frame, shard)
        try:
            try:
                connection.send(frame.call_id, frames.REPLY, reply, shard)
            except (TypeError, MemoryError) as exc:  # The result itself cannot travel.
                connection.send(frame.call_id, frames.REPLY, self._unsendable(frame, exc), shard)
        except OSError:
            pass  # The caller went away; its reader has reported that already.

    def stop(self) -> None:
        with self._lock:
            self._closed = True
            connections = list(self._connections)
            threads = list(self._threads)
        if self._listener is not None:
            _listening.discard(self)
            self._remove_path()
            try:
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
        for connection in connections:
            try:
                connection.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._watchdog.stop()
        # A call still running user code is not waited for long (like gRPC's
        # handlers, it finishes on its own); idle readers end at once.
        deadline = time.monotonic() + 2.0
        current = threading.current_thread()
        for thread in threads:
            if thread is not current:
                thread.join(timeout=max(0.0, deadline - time.monotonic()))

    def _remove_path(self) -> None:
        """Unlinks the socket file unless another server has taken the path since."""
        try:
            if os.stat(self.path).st_ino == self._inode:
                os.unlink(self.path)
        except OSError:
            pass


_listening: set[LocalListener] = set()


def remove_socket_files() -> None:
    """Unlinks this process's listening socket files: it is about to end without stopping them."""
    for listener in list(_listening):
        listener._remove_path()


atexit.register(remove_socket_files)
