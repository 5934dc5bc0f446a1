"""The same-host path: where a server's Unix socket lives, and one connection.

A server listening on loopback port P also listens on
``/tmp/launchpad_py-<uid>/courier-P.sock``. The directory is created 0700
and must belong to this user, so only the same user can connect. When
another user made that path first, it is refused and, said once in the log,
a private directory is used instead: ``$LAUNCHPAD_PY_SOCKET_DIR``, else
``$XDG_RUNTIME_DIR/launchpad_py``, else ``~/.launchpad_py/sockets``. A client of
``127.0.0.1:P`` (or ``localhost:P``) derives the path from the address, needs
no extra round trip to find it, and falls back to gRPC when it is absent.

On connecting, the server writes its port and network namespace, so a client
in another namespace sharing ``/tmp`` (a container) never talks to the wrong
server.

A server that is killed cannot remove its socket; ``remove_stale_sockets``
(launchers call it when a program starts and ends) removes those that refuse
connections. It dials only sockets that the kernel's table of this network
namespace does not list as listening: dialing a live server starts its accept
thread, and every launch on the machine would otherwise wake every node of every
running program (2,000 nodes: 2,000 connections and threads per launch). Servers bind under a shared lock on the directory and the sweep
holds it exclusively, so a socket bound but not yet listening is never taken
for a dead one.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
import socket
import stat
import struct

from launchpad_py.courier import errors, frames, open_files, serialization, shm
from launchpad_py.courier.transports import interface
from launchpad_py.courier.transports.sockets import socket_channel

LOOPBACK_HOSTS = ('127.0.0.1', 'localhost', '::1', '[::1]')
_GREETING = struct.Struct('<QQ')
# Buffers at least this large go through shared memory instead of the socket
# (measured on a 2-core VM: equal cost near 256 KiB, shared memory 3x faster at 64 MiB).
SHM_MIN_BYTES = 256 * 1024
# Kernel socket buffers: fewer wake-ups per large message; small ones unaffected.
_SOCKET_BUFFER = 1024 * 1024


SOCKET_DIR_ENV = 'LAUNCHPAD_PY_SOCKET_DIR'
# The directory every process of a user tries first ({uid}: theirs).
SHARED_DIR = '/tmp/launchpad_py-{uid}'
_log = logging.getLogger('launchpad_py.courier')
_refused: set[str] = set()  # Directories already reported as unsafe (said once each).


def runtime_dir() -> str | None:
    """This user's private directory for courier sockets, or None if none can be had.

    Every process of the user finds the same one, so a client finds a server's
    socket from its address alone.
    """
    for path in _candidates():
        why = _private(path)
        if why is None:
            return path
        if path not in _refused:
            _refused.add(path)
            _log.warning('launchpad_py: not using %s for courier sockets and run files: %s. '
                         'same-host calls use the next private directory that can be made (else '
                         'gRPC). Remove it (ask its owner or an admin if it is not yours), or '
                         'set %s to a directory only you can enter', path, why, SOCKET_DIR_ENV)
    return None


def _candidates() -> list[str]:
    explicit = os.environ.get(SOCKET_DIR_ENV)
    if explicit:
        return [explicit]
    found = [SHARED_DIR.format(uid=os.getuid())]
    runtime = os.environ.get('XDG_RUNTIME_DIR')
    if runtime and os.path.isdir(runtime):
        found.append(os.path.join(runtime, 'launchpad_py'))
    found.append(os.path.join(os.path.expanduser('~'), '.launchpad_py', 'sockets'))
    return found


def _private(path: str) -> str | None:
    """None when ``path`` is (now) a directory of ours that nobody else may enter; else why not."""
    try:
        os.makedirs(os.path.dirname(path), 0o700, exist_ok=True)
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        return f'cannot create it ({exc.strerror})'
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        return 'it is not a directory'
    if info.st_uid != os.getuid():
        return f'it belongs to uid {info.st_uid}, not {os.getuid()}'
    if info.st_mode & 0o077:
        return f'its mode {oct(info.st_mode & 0o777)} lets others in (0700 needed)'
    return None


@contextlib.contextmanager
def directory_lock(directory: str, exclusive: bool):
    """Holds the lock of ``directory``: shared to create entries, exclusive to sweep them."""
    fd = os.open(os.path.join(directory, '.lock'), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


def remove_stale_sockets() -> list[str]:
    """Removes the sockets of servers that died without stopping; returns their paths."""
    directory = runtime_dir()
    if directory is None:
        return []
    removed = []
    with directory_lock(directory, exclusive=True):
        listening = _listening_paths()
        for name in os.listdir(directory):
            path = os.path.join(directory, name)
            if (name.startswith('courier-') and name.endswith('.sock')
                    and path not in listening and _refuses(path)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                removed.append(path)
    return removed


def _listening_paths() -> frozenset[str]:
    """The paths of the Unix sockets listening in this network namespace (/proc/net/unix).

    Absent ones are not thereby dead: a server in another namespace sharing ``/tmp`` is not
    listed; ``_refuses`` asks those.
    """
    try:
        with open('/proc/net/unix') as table:
            next(table, None)  # Num RefCount Protocol Flags Type St Inode Path
            return frozenset(fields[7] for fields in map(str.split, table)
                             if len(fields) == 8 and int(fields[3], 16) & _ACCEPTING)
    except (OSError, ValueError):
        return frozenset()


_ACCEPTING = 0x10000  # __SO_ACCEPTCON in /proc/net/unix's Flags: the socket listens.


def _refuses(path: str) -> bool:
    """True only when nothing listens on ``path`` (a live but busy server is kept)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        sock.connect(path)
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
    finally:
        sock.close()
    return False


def socket_path(port: int) -> str | None:
    directory = runtime_dir()
    return None if directory is None else os.path.join(directory, f'courier-{port}.sock')


def local_port(address: str) -> int | None:
    """The port when ``address`` names this host's loopback, else None."""
    host, _, port = address.rpartition(':')
    if host not in LOOPBACK_HOSTS or not port.isdigit():
        return None
    return int(port)


def network_namespace() -> int:
    try:
        return os.stat('/proc/self/ns/net').st_ino
    except OSError:
        return 0


def greeting(port: int) -> bytes:
    return _GREETING.pack(port, network_namespace())


def tune(sock: socket.socket) -> None:
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, _SOCKET_BUFFER)
        except OSError:
            pass


def shut(sock: socket.socket) -> None:
    """Closes ``sock`` after shutting it down, so a thread reading it wakes at once."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


class Connection:
    """One Unix-socket connection: framed sends under a lock, a reader, segments."""

    def __init__(self, sock: socket.socket):
        tune(sock)
        self.sock = sock
        # Segments the peer sent us that we dropped, and notices of our own we closed.
        self.released = shm.ReleaseQueue()
        self.pool = shm.SegmentPool(dropped=self.released)  # Segments we write into.
        self.reader = frames.Reader(sock, self.released, on_released=self.pool.release)
        self.outbox = frames.Outbox(sock, self.reader.loop)
        # Segments the peer released are returned to the pool by the reader itself.
        self.read = self.reader.read

    def send(self, call_id: int, kind: int, obj, counts=None, hold: bool = False) -> None:
        """Sends ``obj``; its size is added to ``counts.bytes_out`` (if given) before it leaves.
        ``hold``: a small frame may wait for the next send or ``flush`` (one write for both)."""
        pickled, buffers = serialization.encode(obj)
        released = self.released.drain() if self.released.ids else ()
        if not buffers and not released:  # The small call: one write.
            self.outbox.small(call_id, kind, pickled, counts, hold)
            return
        parts, fd = frames.encode_parts(call_id, kind, pickled, buffers, self.pool, released,
                                        SHM_MIN_BYTES)
        self.outbox.frame(parts, fd, counts)

    def flush(self) -> None:
        self.outbox.flush()

    #: A send to a Unix socket its server closed fails at once (EPIPE): nothing to ask ahead.
    may_go_unseen = False

    def peer_gone(self) -> bool:
        """Never known ahead here: a send to a closed Unix socket fails at once (EPIPE)."""
        return False

    def close(self) -> None:
        shut(self.sock)
        self.reader.close()
        self.pool.close()


def connect(port: int, timeout: float | None = None) -> Connection | None:
    """A connection to the local server of ``port``, or None when it has none."""
    path = socket_path(port)
    if path is None:
        return None
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError as exc:
        if open_files.is_exhausted(exc):
            raise errors.CourierUnavailableError(
                open_files.exhausted(f'cannot connect to the courier server on port {port}')) from exc
        raise
    try:
        sock.settimeout(timeout if timeout else 10.0)
        sock.connect(path)
        expected = greeting(port)
        received = b''
        while len(received) < len(expected):
            chunk = sock.recv(len(expected) - len(received))
            if not chunk:
                raise ConnectionError('closed during greeting')
            received += chunk
        sock.settimeout(None)
    except OSError:
        sock.close()
        return None
    if received != expected:
        sock.close()
        return None
    return Connection(sock)


_channels = socket_channel.ChannelCache(server_of=local_port)  # By address; closed by port.


def forget(host: str, port: int) -> None:
    """Closes the cached channel to the stopped loopback server on ``port``, if any."""
    if host in LOOPBACK_HOSTS:
        _channels.close_server(port)


def dial(dial: interface.Dial) -> socket_channel.SocketChannel | None:
    """The channel of this process to the loopback server at ``dial.address`` (one per
    address, shared by its clients); None when the address is not this host's loopback."""
    port = local_port(dial.address)
    if port is None:
        return None
    return _channels.get(dial.address, dial.address, lambda: functools.partial(connect, port))
