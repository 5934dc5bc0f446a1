"""Serving the connections of one courier listener, whichever socket they came in on.

Each connection has a reader thread, which runs the calls it reads itself (no
thread hand-off, which is most of a tiny call's cost). A connection opened for
synchronous calls carries one call at a time. Calls on a futures connection
must run concurrently, so a watchdog gives the reading role to a new thread
when a call keeps its reader too long, and the connection's calls go to the
server's thread pool while that call runs (see ``reader_handover.py``). Either way the
server's ``thread_pool_size`` bounds how many calls run at once (``dispatch`` takes
the permit).

``SocketServing`` is the part both socket listeners share: the Unix-socket one
(``uds_server.LocalListener``) and the raw-TCP one (``tcp.TcpListener``) each bind,
accept and admit their connections, and hand them over here.
"""

from __future__ import annotations

import concurrent.futures
import socket
import threading
import time
from typing import Callable

from launchpad_py.courier import frames, serialization, stats as stats_module
from launchpad_py.courier.transports.sockets import first_connection, reader_handover

SYNC_REQUEST, FUTURE_REQUEST = 1, 3


class SocketServing:
    """Reads, runs and answers the calls of the connections a listener admits."""

    def __init__(self, name: str, dispatch: Callable, unsendable: Callable,
                 executor: concurrent.futures.Executor,
                 thread_initializer: Callable[[], None] | None = None, *,
                 stats: stats_module.ServerStats | None = None):
        self._stats = stats  # The server's counters: calls and reply bytes are counted here.
        # Small calls are answered on the connection's own thread, which must be
        # set up like the executor's threads.
        self._thread_initializer = thread_initializer
        self._dispatch = dispatch
        self._unsendable = unsendable
        self._executor = executor
        self._name = name
        self._connections: set[frames.Connection] = set()
        self._watchdog = reader_handover.Watchdog(self._promote, f'{self._name}-watchdog')
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False
        self._listener: socket.socket | None = None
        self._accepting = False
        self._waiting: int | None = None  # The listener's descriptor, watched until then.

    def _accept_from_first_connection(self, accept: Callable[[], None]) -> None:
        """Runs ``accept`` (the accept loop) on a thread once a connection arrives: an idle
        listener holds no thread (see ``first_connection.py``)."""
        def begin() -> None:
            with self._lock:
                if self._closed or self._accepting:
                    return
                self._accepting = True
            self._spawn(accept)

        self._waiting = self._listener.fileno()
        first_connection.watch(self._waiting, begin)

    def _spawn(self, target, *args) -> None:
        def run() -> None:
            if self._thread_initializer is not None:
                self._thread_initializer()
            target(*args)

        thread = threading.Thread(target=run, name=self._name, daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _admit_connection(self, connection: frames.Connection, peer=None) -> bool:
        """Starts serving ``connection``; False once the listener is closed."""
        turn = reader_handover.Turn(connection, peer)
        turn.reader = token = object()
        with self._lock:
            if self._closed:
                connection.close()
                return False
            self._connections.add(connection)
        self._watchdog.add(turn)
        self._spawn(self._serve, turn, token)
        return True

    def _promote(self, turn: reader_handover.Turn, token: object) -> None:
        """The watchdog's hand-over: a new thread reads for ``turn`` (after a stop, it finds
        the connection shut and closes it)."""
        self._spawn(self._serve, turn, token)

    def _serve(self, turn: reader_handover.Turn, token: object) -> None:
        """Reads and runs calls until the peer goes, or another reader takes over."""
        ended = self._read_calls(turn, token)
        if ended is None:
            return  # Demoted: the new reader owns the connection now.
        self._farewell(turn, ended)
        self._watchdog.discard(turn)
        with self._lock:
            self._connections.discard(turn.connection)
        turn.connection.close()

    def _read_calls(self, turn: reader_handover.Turn, token: object) -> BaseException | None:
        """The reader's loop; returns why it ended, None when it lost the reading role."""
        connection, shard, watchdog = turn.connection, self._own_shard(), self._watchdog
        turn.thread_id = threading.get_native_id()  # Whose counts tell a stuck call.
        reader = connection.reader
        compiled = reader.loop is not None  # Its reads say whether a next request waits.
        # Until a futures call comes (a promoted reader's connection has had one), this
        # reader is the connection's only writer: a reply and the next read may be one step.
        sync_only = turn.serial == 0 and reader.answers
        try:
            connection.flush()  # Replies a reader that lost the role to us held back, if any.
            frame = connection.read()
            while True:  # No local keeps a frame: its shared memory is released sooner.
                if frame.kind == SYNC_REQUEST:
                    if sync_only:
                        frame = self._answer_then_read(connection, frame, shard)
                        continue
                    self._answer(connection, frame, shard)
                    frame = connection.read()
                    continue
                sync_only = False
                if turn.detours:  # A call here blocked lately: the pool runs the next.
                    self._executor.submit(self._answer, connection, frame)
                else:
                    watchdog.begin(turn, frame)
                    # With another request already received, this reply waits to leave with
                    # the next one's: the caller then wakes once for both. Only this thread
                    # reads, so what was buffered at the read is what is buffered now.
                    self._answer(connection, frame, shard,
                                 reader.small_next if compiled else reader.has_small_frame())
                    if not turn.finish(token):
                        connection.flush()  # The new reader may have flushed before we held.
                        return None
                frame = connection.read()
        except Exception as exc:  # Peer gone, a bad frame, or the pool shut down on stop.
            return exc

    def _farewell(self, turn: reader_handover.Turn, ended: BaseException) -> None:
        """Says why a connection ended, where that is news (see ``tcp.py``)."""

    def _own_shard(self) -> stats_module.Shard | None:
        """The counters of the calling thread, which it then writes alone."""
        return None if self._stats is None else self._stats.shard()

    def _answer(self, connection: frames.Connection, frame: frames.Frame,
                shard: stats_module.Shard | None = None, hold: bool = False,
                reply: tuple | None = None) -> None:
        """Runs ``frame`` (unless its ``reply`` is given) and sends its reply; held back when
        ``hold`` (another request waits, already read, for the same thread to run next: it
        then sends both)."""
        if shard is None:  # On a pool thread.
            shard = self._own_shard()
        if reply is None:
            reply = self._dispatch(frame, shard)
        try:
            try:
                connection.send(frame.call_id, frames.REPLY, reply, shard, hold)
            except (TypeError, MemoryError) as exc:  # The result itself cannot travel.
                connection.send(frame.call_id, frames.REPLY, self._unsendable(frame, exc), shard)
        except OSError:
            pass  # The caller went away; its reader has reported that already.

    def _answer_then_read(self, connection: frames.Connection, frame: frames.Frame,
                          shard: stats_module.Shard | None) -> frames.Frame:
        """Runs a synchronous call and returns the next request: a small reply leaves and
        the next request's receive starts in one release of the GIL (``_cframes.answer_small``),
        where a send then a read would take the GIL back between them, and with many
        connections' readers waiting for it, often wait for it there. The pure loop sends
        straight on the socket instead, without the connection's ``Outbox`` and its lock (two
        Python calls less, each paid while the other connections' readers queue for the
        GIL). Only for a reader that is its connection's only writer, and not over TLS."""
        reply = self._dispatch(frame, shard)
        try:
            pickled, buffers = serialization.encode(reply)
        except (TypeError, MemoryError):  # ``_answer``'s way says why to the caller.
            buffers = True
        released = getattr(connection, 'released', None)  # Segment ids to hand back (uds).
        if buffers or (released is not None and released.ids):
            # A frame of its own: the connection's send encodes it again (a pickle of the
            # envelope; out-of-band buffers are not copied).
            self._answer(connection, frame, shard, reply=reply)
            return connection.read()
        if shard is not None:
            shard.bytes_out += frames.HEADER.size + len(pickled)
        return connection.reader.answer_and_read(frame.call_id, frames.REPLY, pickled)

    def stop(self, grace: float | None = None) -> None:
        """Closes the listener and its connections; ``grace`` is not used (see below)."""
        del grace
        if self._waiting is not None:
            first_connection.forget(self._waiting)
        with self._lock:
            self._closed = True
            connections = list(self._connections)
            threads = list(self._threads)
        if self._listener is not None:
            self._before_close()
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

    def _before_close(self) -> None:
        """What a listener does just before its socket closes (the Unix one: its file goes)."""
