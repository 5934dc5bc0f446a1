"""Starts a listener on its first connection, so an idle courier server holds no thread for it.

grpc's Python server polls its completion queue on a thread per server that wakes five
times a second (grpc checks for signals every 200 ms), calls or not: at 1,000 idle local
nodes, with grpc's own timer and event-engine threads, that was ≈0.75 of a core on a
2-core machine, taken from the nodes still starting. Most local peers never use gRPC
(they take the Unix socket), so the serving thread need not run until someone dials it;
likewise the Unix-socket and raw-TCP accept threads of a server nobody calls.

A port is bound and listening before its listener starts (gRPC's from
``add_insecure_port`` on): a client that connects meanwhile waits in the kernel's
backlog. One thread per process watches every such listening socket (epoll, no
timeout: it sleeps until a connection arrives) and starts its listener, which then
accepts the waiting connection as usual.

    fd = listening_descriptor(port, since=lowest_free_descriptor_before_binding)
    watch(fd, server.start)        # runs server.start() on the first connection
    forget(fd)                     # before the socket closes, if it never came

Descriptors are watched as they are, not duplicated: 2,000 local_mt nodes in one
process already hold ≈20,000 (their listeners, and both ends of each connection).
"""

from __future__ import annotations

import ipaddress
import os
import select
import socket
import threading
from typing import Callable

# The listening socket is looked for in this many numbers from the lowest free one before
# the bind: gRPC opens a few descriptors of its own when it binds (more on its first use in
# a process), and other threads (local_mt's nodes start at once) open theirs meanwhile.
_WINDOW = 4096
#: Held around "lowest free descriptor, bind, find": binds of one process one at a time
#: keep the listening socket close to where the search starts.
binding = threading.Lock()


def lowest_free_descriptor() -> int:
    """The descriptor number the next open would get (where a new listening socket lands)."""
    probe = os.open(os.devnull, os.O_RDONLY)
    os.close(probe)
    return probe


def can_wait(host: str) -> bool:
    """Whether a server bound to ``host`` has exactly one listening socket to watch: an
    address literal, not a wildcard or a name (which gRPC may bind once per address)."""
    try:
        address = ipaddress.ip_address(host.strip('[]'))
    except ValueError:
        return False
    return not address.is_unspecified


def listening_descriptor(port: int, since: int) -> int | None:
    """The descriptor of this process's listening TCP socket on ``port``, or None.

    Looked for outwards from descriptor ``since`` (``since``, +1, -1, +2, ...), then among
    all of the process's. Outwards, not upwards only: a new descriptor takes the lowest free
    number, and another thread that closes one meanwhile leaves a hole below ``since``
    where the socket lands. Upwards only, such a socket cost the whole window and then a
    listing of every descriptor; at 1,000 local_mt nodes starting at once that was 46
    probes a node on average, against 2 at 100 (``bench/launch_calls_before.json``).
    """
    for fd in _outwards(since, _WINDOW):
        if _listening_on(fd, port):
            return fd
    for name in os.listdir('/proc/self/fd'):
        if _listening_on(int(name), port):
            return int(name)
    return None


def _outwards(center: int, span: int):
    """``center``, ``center + 1``, ``center - 1``, ... up to ``span`` numbers each way (none
    below 0)."""
    yield center
    for step in range(1, span):
        yield center + step
        if center - step >= 0:
            yield center - step


def _listening_on(fd: int, port: int) -> bool:
    try:
        copy = os.dup(fd)  # A socket object of its own to ask, closed again below.
    except OSError:  # Closed.
        return False
    try:
        sock = socket.socket(fileno=copy)
    except OSError:  # Not a socket.
        os.close(copy)
        return False
    with sock:
        try:
            name = sock.getsockname()
            return bool(sock.type == socket.SOCK_STREAM and isinstance(name, tuple)
                        and name[1] == port
                        and sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))
        except OSError:
            return False


class _Watcher:
    """The process's one thread that sleeps on every waiting server's listening socket;
    it runs while any server waits, and ends when none does (nothing left after a stop)."""

    def __init__(self):
        self._epoll = select.epoll()
        self._wake = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._epoll.register(self._wake, select.EPOLLIN)
        self._waiting: dict[int, Callable[[], None]] = {}
        #: Taken by watch and the thread's decision to end, never by forget (see there).
        self._lock = threading.Lock()
        self._running = False

    def watch(self, fd: int, start: Callable[[], None]) -> None:
        # Registered before it is in the dict: a connection that comes in between is seen
        # again on the next poll (level-triggered). No system call under the lock (forget).
        self._epoll.register(fd, select.EPOLLIN)
        with self._lock:
            self._waiting[fd] = start
            start_thread, self._running = not self._running, True
        if start_thread:
            threading.Thread(target=self._run, name='courier-grpc-first-connection',
                             daemon=True).start()

    def forget(self, fd: int) -> None:
        # No lock: 2,000 local_mt nodes stopping at once (three forgets each) queued on one
        # for 74 s with four busy threads (bench/forget_convoy.json), past the grace period.
        # dict.pop is atomic under the GIL, so of forget and the watcher's thread exactly
        # one takes fd out, and only that one unregisters it.
        if self._waiting.pop(fd, None) is None:
            return
        self._epoll.unregister(fd)
        if not self._waiting:
            # The thread ends (unless a watch came meanwhile: it decides under the lock).
            os.eventfd_write(self._wake, 1)

    def _run(self) -> None:
        running = True
        while running:
            events = self._epoll.poll()
            if any(fd == self._wake for fd, _ in events):
                try:
                    os.eventfd_read(self._wake)
                except BlockingIOError:
                    pass
            arrived = []
            with self._lock:
                for fd, _ in events:
                    start = self._waiting.pop(fd, None) if fd != self._wake else None
                    if start is not None:  # Not forgotten meanwhile.
                        arrived.append((fd, start))
                running = self._running = bool(self._waiting)
            for fd, start in arrived:
                self._epoll.unregister(fd)
                start()

    def close_in_child(self) -> None:
        self._epoll.close()
        os.close(self._wake)


_watcher: _Watcher | None = None
_watcher_lock = threading.Lock()


def watch(fd: int, start: Callable[[], None]) -> None:
    """Calls ``start()`` once the listening socket ``fd`` has a connection waiting; the
    caller must ``forget(fd)`` before it closes the socket."""
    global _watcher
    with _watcher_lock:
        if _watcher is None:
            _watcher = _Watcher()
    _watcher.watch(fd, start)


def forget(fd: int) -> None:
    """Stops watching ``fd`` (its listener starts no more on a connection)."""
    if _watcher is not None:
        _watcher.forget(fd)


def _after_fork_in_child() -> None:
    # The watcher's thread does not survive a fork; a child that serves gets its own.
    global _watcher, _watcher_lock
    if _watcher is not None:
        _watcher.close_in_child()
    _watcher, _watcher_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
