"""Holds a loopback server's gRPC port with a plain socket and relays its connections to
gRPC, so that a server only same-host peers call never starts gRPC at all.

Creating a gRPC server starts gRPC's core in the process: six threads (a timer, four
event-engine workers, a lifeguard) that wake about seven times a second for ever, about
0.37 ms of CPU a second, plus ≈3 ms of CPU and ≈0.9 MiB of memory to start. A local_mp
node's peers take the Unix socket, so at 2,000 nodes that was 2,000 idle gRPC cores
taking CPU from the nodes still starting, more the longer the launch: a cost that grew
faster than the number of nodes (issue 25).

A server bound to a loopback address therefore binds its port with a plain listening
socket (the door: nobody else can take the port, clients that connect wait in the
kernel's backlog). On the first connection the listener starts gRPC on an abstract Unix
socket, and this relay copies the bytes of each connection of the door to it and back.
An abstract socket is reachable from the same network namespace only, exactly like the
loopback port, so nothing is exposed that was not; gRPC still sees and checks every byte
(TLS, tokens, handshake and idle timeouts). The relay is one thread for all of a server's
connections, non-blocking both ways, so a peer that stops reading stalls only itself.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import select
import socket
import threading
import time

from launchpad_py.courier import open_files

_log = logging.getLogger('launchpad_py.courier')

# Bytes read from one side at a time (a side's peer is not read while they wait).
_CHUNK = 256 * 1024
# Out of descriptors, the door is not watched for this long (its connections wait).
_PAUSE_S = 0.1


def applies(host: str) -> bool:
    """Whether a server bound to ``host`` defers gRPC: a loopback address literal."""
    try:
        return ipaddress.ip_address(host.strip('[]')).is_loopback
    except ValueError:
        return False


def bind_door(host: str, port: int, backlog: int) -> socket.socket:
    """A listening socket on ``host:port`` (``port`` 0: any); OSError when it cannot be bound.

    SO_REUSEADDR as gRPC sets it: a port left in TIME_WAIT by a stopped server can be bound
    again, one another socket listens on cannot."""
    address = host.strip('[]')
    family = socket.AF_INET6 if ':' in address else socket.AF_INET
    door = socket.socket(family, socket.SOCK_STREAM)
    try:
        door.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        door.bind((address, port))
        door.listen(backlog)
        door.setblocking(False)
    except OSError:
        door.close()
        raise
    return door


class _Side:
    """One socket of a relayed pair and the bytes waiting to be written to it."""

    __slots__ = ('sock', 'fd', 'pending', 'peer', 'ended', 'dead')

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.fd = sock.fileno()
        self.pending = b''  # Read from the peer, not yet written to this socket.
        self.peer: _Side = self
        self.ended = False  # This socket sent its end: nothing more to read from it.
        self.dead = False  # Hung up or failed: nothing can be written to it either.


_READ = select.EPOLLIN | select.EPOLLRDHUP
_NO_ROOM = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_BROKEN = select.EPOLLHUP | select.EPOLLERR


class Relay:
    """Accepts the door's connections and relays each to a target (an abstract Unix
    socket's address, ``'\\0name'``), on one thread, from ``start`` until ``close()``.

    ``max_connections``: connections beyond it are closed on arrival (gRPC caps its own
    as well; this caps what the relay holds)."""

    def __init__(self, door: socket.socket, name: str, max_connections: int):
        # Made before gRPC starts (which may take the last free descriptors); relays from
        # ``start``.
        self._door: socket.socket | None = door
        self._target = ''
        self._max = max_connections
        self._epoll = select.epoll()
        try:
            self._wake = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        except OSError:
            self._epoll.close()
            raise
        self._epoll.register(self._wake, select.EPOLLIN)
        self._sides: dict[int, _Side] = {}
        self._shut_door = self._closing = False
        self._paused_until: float | None = None  # Door unwatched until then (no descriptors).
        self._short = False  # Out of descriptors, and said so.
        self._door_closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self, target: str) -> None:
        """Relays the door's connections to ``target`` from now on."""
        self._target = target
        self._epoll.register(self._door.fileno(), select.EPOLLIN)
        self._thread.start()

    def shut_door(self) -> None:
        """Accepts no more connections (the port is free once this returns); the relayed
        ones go on, so that calls in flight can still answer."""
        self._shut_door = True
        self._wake_thread()
        self._door_closed.wait()

    def close(self) -> None:
        """Closes every relayed connection and the door, and ends the thread."""
        self._closing = True
        self._wake_thread()
        self._thread.join()

    def forget_door(self) -> None:
        """Before ``start``: lets go of everything but the door (its owner keeps it)."""
        self._door = None
        self._epoll.close()
        os.close(self._wake)

    def _wake_thread(self) -> None:
        try:
            os.eventfd_write(self._wake, 1)
        except OSError:  # Closed: the thread has ended.
            pass

    def _run(self) -> None:
        try:
            while not self._closing:
                if self._shut_door and self._door is not None:
                    self._close_door()
                timeout = -1.0
                if self._paused_until is not None and self._door is not None:
                    timeout = self._paused_until - time.monotonic()
                    if timeout <= 0:
                        self._paused_until, timeout = None, -1.0
                        self._epoll.register(self._door.fileno(), select.EPOLLIN)
                for fd, events in self._epoll.poll(timeout):
                    if fd == self._wake:
                        try:
                            os.eventfd_read(self._wake)
                        except BlockingIOError:
                            pass
                    elif self._door is not None and fd == self._door.fileno():
                        self._accept()
                    else:
                        side = self._sides.get(fd)
                        if side is not None:  # Not dropped earlier in this batch.
                            self._serve(side, events)
        except Exception:  # noqa: BLE001 - logged; the connections close below
            _log.exception('courier gRPC relay %s failed', self._thread.name)
        finally:
            if self._door is not None:
                self._close_door()
            for side in list(self._sides.values()):
                self._drop(side)
            self._epoll.close()
            os.close(self._wake)

    def _close_door(self) -> None:
        if self._paused_until is None:
            self._epoll.unregister(self._door.fileno())
        self._door.close()
        self._door = None
        self._door_closed.set()

    def _accept(self) -> None:
        while True:
            with open_files.taking_descriptors():  # Not while gRPC starts on the reserve.
                try:
                    client, _ = self._door.accept()
                except (BlockingIOError, InterruptedError):
                    return
                except OSError as exc:
                    if exc.errno in _NO_ROOM:
                        self._pause(exc)  # The connection stays queued.
                        return
                    continue  # The client left before it was accepted.
                if len(self._sides) >= 2 * self._max:
                    client.close()
                    continue
                try:
                    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                except OSError as exc:  # No room for the second socket: the client tries again.
                    client.close()
                    if exc.errno in _NO_ROOM:
                        self._pause(exc)
                        return
                    raise
            try:
                server.connect(self._target)
            except OSError as exc:
                _log.warning('courier gRPC relay %s cannot reach gRPC: %s', self._thread.name, exc)
                server.close()
                client.close()
                continue
            self._short = False
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            a, b = _Side(client), _Side(server)
            a.peer, b.peer = b, a
            for side in (a, b):
                side.sock.setblocking(False)
                self._sides[side.fd] = side
                self._epoll.register(side.fd, _READ)

    def _pause(self, exc: OSError) -> None:
        """Out of descriptors: the door is left alone for a moment (watched, it would spin)."""
        if not self._short:  # Once until an accept succeeds again, not every moment.
            _log.warning('courier gRPC relay %s cannot accept now: %s', self._thread.name, exc)
            self._short = True
        self._epoll.unregister(self._door.fileno())
        self._paused_until = time.monotonic() + _PAUSE_S

    def _serve(self, side: _Side, events: int) -> None:
        if events & select.EPOLLOUT:
            self._flush(side)
        if side.fd not in self._sides:
            return
        if events & _BROKEN:
            self._hung_up(side)
        elif events & _READ:
            self._read(side)

    def _read(self, side: _Side) -> None:
        """Moves what ``side`` sent to its peer (only read while the peer has nothing waiting)."""
        try:
            data = side.sock.recv(_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._hung_up(side)
            return
        if data:
            side.peer.pending = data
        else:
            side.ended = True
        self._flush(side.peer)

    def _hung_up(self, side: _Side) -> None:
        """``side`` can take nothing more: what it still had goes to its peer, then the pair
        closes."""
        side.ended = side.dead = True
        self._epoll.unregister(side.fd)
        if side.pending:  # Bytes for a socket that cannot take them: the pair is over.
            self._drop(side)
            return
        while len(side.peer.pending) < 16 * _CHUNK:  # What the kernel still held for us.
            try:
                data = side.sock.recv(_CHUNK)
            except OSError:
                break
            if not data:
                break
            side.peer.pending += data
        self._flush(side.peer)

    def _flush(self, side: _Side) -> None:
        """Writes ``side``'s pending bytes; passes its peer's end on once they are out."""
        if side.pending:
            try:
                sent = side.sock.send(side.pending)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                self._drop(side)
                return
            side.pending = side.pending[sent:]
        peer = side.peer
        if not side.pending and peer.ended:
            if peer.dead or side.ended:
                self._drop(side)
                return
            try:
                side.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        self._watch(side)
        self._watch(peer)

    def _watch(self, side: _Side) -> None:
        """Reads ``side`` while its peer has nothing waiting; waits for room to write to it
        while it has something waiting itself."""
        if side.dead or side.fd not in self._sides:
            return
        mask = select.EPOLLOUT if side.pending else 0
        if not side.ended and not side.peer.pending:
            mask |= _READ
        self._epoll.modify(side.fd, mask)

    def _drop(self, side: _Side) -> None:
        """Closes both sockets of ``side``'s pair."""
        for one in (side, side.peer):
            if self._sides.pop(one.fd, None) is None:
                continue
            if not one.dead:
                self._epoll.unregister(one.fd)
            one.sock.close()
