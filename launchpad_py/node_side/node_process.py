"""Running one node's executable in a process of its own, whoever started the process.

Shared by the launchers' worker processes and the children of a
``MultiProcessingColocation``. The process talks to its parent over a
``Channel``::

    process → parent: ('ready', {key: 'host:port'}), ('stop_program',), ('failed', summary,
                      traceback, exception_bytes), ('finished',), ('metrics', request_id,
                      counters), ('resolve', [key, ...]), ('watch', token),
                      ('relocate', {key: stale value})
    parent → process: ('stop',), ('metrics', request_id), ('members', table),
                      ('addresses', {key: 'host:port'}, {key: why unknown}),
                      ('moved', ['host:port', ...]), ('left', {key: ('host:port', why)})

(``table``: the live members of the program's groups, see ``program.group_handle``.)
'ready' carries the addresses the node's servers bound (late binding: they bind
port 0 unless fixed); 'resolve' asks for the addresses of other nodes that the
node's handles reference and it does not know, which 'addresses' answers as
they become known (see ``program.address``); 'watch' asks for a group handle's
member tables, which 'members' then brings on every change (``program.group_handle``).
'relocate' asks again for an address whose server a call failed to reach (the
node may have come back elsewhere), which 'addresses' answers once it is known.
'moved' names addresses a peer left for good (a restarted pod comes back at a
new IP, where the old one may not even refuse connections): calls waiting there
fail at once, and their clients then ask again ('relocate'). 'left' names addresses
whose node left for good (its elastic group shrank): calls there fail at once, saying
why, and are never sent anywhere else (``Directory.retire``).

The end of the channel means the parent died; the process then ends too, so
no node outlives whoever started it.
"""

from __future__ import annotations

import ctypes
import errno
import importlib
import multiprocessing.connection as mpc
import os
import signal
import socket
import struct
import sys
import threading
import traceback
from multiprocessing.reduction import ForkingPickler
from typing import Callable

from launchpad_py import courier
from launchpad_py.node_side import runtime
from launchpad_py.node_side.reporting import node_metrics
from launchpad_py.courier import open_files, serialization
from launchpad_py.program import ExecutionContext, Executable, address, group_handle

#: Comma-separated modules imported before any node code (the compatibility runner uses it).
PRELOAD_ENV = 'LAUNCHPAD_PY_PRELOAD'


class Channel:
    """A connection whose sends are safe from several threads."""

    def __init__(self, connection: mpc.Connection):
        self._connection = connection
        self._lock = threading.Lock()

    def send(self, *message) -> bool:
        with self._lock:
            try:
                self._connection.send(message)
                return True
            except (OSError, ValueError):  # The other side is gone; the reader will notice.
                return False

    def nudge(self, frame: bytes) -> None:
        """Sends ``frame`` (one whole message, see ``frame``) unless that would wait.

        For heartbeats: a launcher pings hundreds of channels from one thread, and a
        ping that waited on one channel (a send in progress to a stalled peer, a full
        socket buffer) would silence all the others. A send in progress says as much
        as the ping; a full buffer means the peer has not read the last ones yet. The
        send is one non-blocking call that keeps the GIL, so a round of pings is not a
        round of GIL hand-offs in a busy launcher.
        """
        if not self._lock.acquire(blocking=False):
            return
        try:
            sent = _send_now(self._connection.fileno(), frame)
        except OSError:  # Closed: the reader will notice.
            sent = len(frame)
        if 0 < sent < len(frame):  # Rare (a nearly full buffer): the rest goes as it can.
            threading.Thread(target=self._finish, args=(frame[sent:],), daemon=True).start()
        else:
            self._lock.release()

    def post(self, frame: bytes) -> None:
        """Sends ``frame`` (one whole message, see ``frame``) without making the caller wait.

        For the stop: one supervisor thread asks hundreds of nodes to stop, and blocking
        sends, each handing the GIL over and waiting to get it back in a busy launcher,
        took 9.5 s for 300 pods (32 ms each, load 100), most of a 10 s grace period. Unlike
        a ``nudge`` the message is never dropped: what cannot go now goes on a thread.
        """
        if not self._lock.acquire(blocking=False):  # A send in progress: ours goes after it.
            threading.Thread(target=self._send_later, args=(frame,), daemon=True).start()
            return
        try:
            sent = _send_now(self._connection.fileno(), frame)
        except OSError:  # Closed: the reader will notice.
            sent = len(frame)
        if sent < len(frame):
            threading.Thread(target=self._finish, args=(frame[sent:],), daemon=True).start()
        else:
            self._lock.release()

    def _send_later(self, frame: bytes) -> None:
        self._lock.acquire()
        self._finish(frame)

    def _finish(self, rest: bytes) -> None:
        """Sends the rest of a nudge or post, holding the lock it left held (frames never
        interleave)."""
        try:
            with socket.socket(fileno=os.dup(self._connection.fileno())) as sock:
                sock.sendall(rest)
        except OSError:
            pass
        finally:
            self._lock.release()

    def recv(self):
        return self._connection.recv()

    def fileno(self) -> int:
        """The socket's descriptor, for a peer that takes the connection over as raw bytes."""
        return self._connection.fileno()

    def close(self) -> None:
        """Closes at once: only where no other thread reads or sends (another thread in
        ``recv`` or a send would then use descriptor None, a TypeError, or a reused one)."""
        self._connection.close()

    def end(self) -> None:
        """Closes the channel for its reader once that is done with it: cut first, so that
        a send blocked on a stalled peer fails now, then closed between two sends."""
        self.cut()
        with self._lock:
            self._connection.close()

    def cut(self) -> None:
        """Ends the connection both ways now, also while a thread waits in ``recv``: ``close``
        alone wakes neither that thread nor the peer until the wait ends."""
        try:
            with socket.socket(fileno=os.dup(self._connection.fileno())) as sock:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:  # Closed already.
            pass


def frame(*message) -> bytes:
    """``message`` as ``Channel.send`` would put it on the wire (for ``Channel.nudge``)."""
    data = ForkingPickler.dumps(message)
    return struct.pack('!i', len(data)) + data


#: ``send(2)`` through a handle that keeps the GIL (the call never waits: MSG_DONTWAIT).
_send = ctypes.PyDLL(None, use_errno=True).send
_send.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int]
_send.restype = ctypes.c_ssize_t
_MSG_DONTWAIT, _MSG_NOSIGNAL = 0x40, 0x4000


def _send_now(fd: int, data: bytes) -> int:
    """Sends what fits now of ``data`` on socket ``fd``; the bytes sent (0: none fit)."""
    sent = _send(fd, data, len(data), _MSG_DONTWAIT | _MSG_NOSIGNAL)
    if sent >= 0:
        return sent
    error = ctypes.get_errno()
    if error in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR):
        return 0
    raise OSError(error, os.strerror(error))


def die_with_parent(parent_pid: int) -> None:
    """Asks Linux to SIGKILL us when our parent dies; a backup for the channel watch."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # The parent died before prctl took effect.
        os._exit(1)


def run(channel: Channel, program_name: str, bind_host: str,
        load: Callable[[], Executable], on_parent_gone: Callable[[], None], *,
        secret: bytes | None = None, addresses: dict[str, str] | None = None,
        ask_parent: bool = True) -> int:
    """Runs the executable ``load()`` returns, reporting to ``channel``; the exit code.

    ``secret`` (the program's) becomes this process's courier default before
    anything is built, so every server and client of the node checks it.
    ``addresses``: those known before the start (a restarted node's own, which it
    binds again). ``ask_parent``: unknown addresses are asked of the parent
    (False where the launcher fixed every address before shipping the node).
    """
    courier.set_default_secret(secret)
    open_files.raise_soft_limit()  # A server with many clients needs a descriptor for each.
    address.directory.learn(addresses or {})
    if ask_parent:
        address.directory.ask = lambda keys: channel.send('resolve', keys)
    group_handle.ask = lambda token: channel.send('watch', token)
    # Even where every address was fixed before the start: a restarted peer may move.
    address.directory.ask_again = lambda stale: channel.send('relocate', stale)
    scope = runtime.ProgramScope(program_name, lambda: channel.send('stop_program'))
    scope.secret = secret
    runtime.activate(scope)
    runtime.bind_thread(scope)
    finished = threading.Event()
    threading.Thread(target=_listen, args=(channel, scope, finished, on_parent_gone),
                     name='lp-control', daemon=True).start()
    # SIGTERM (e.g. from a cluster manager) is a stop request for this node.
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=scope.handle_stop).start())
    try:
        _import_preloaded_modules()  # Before load(), which unpickles node code.
        executable = load()
        runtime.bind_node(runtime.NodeContext(executable.label, executable.index),
                          whole_process=True)
        context = ExecutionContext(executable.label, executable.index, bind_host,
                                   lambda: channel.send('ready', bound_addresses(executable)),
                                   scope.stop_event)
        executable.main(context)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            return _report_failure(channel, finished, exc)
    except BaseException as exc:  # Everything a node raises is reported to the parent...
        if not runtime.ended_by_stop(exc, scope):  # ...but a stop: the node ends quietly.
            return _report_failure(channel, finished, exc)
    finished.set()
    channel.send('finished')
    return 0


def _listen(channel: Channel, scope: runtime.ProgramScope, finished: threading.Event,
            on_parent_gone: Callable[[], None]) -> None:
    while True:
        try:
            message = channel.recv()
        except (EOFError, OSError):
            if not finished.is_set():
                on_parent_gone()
            return
        if message[0] == 'stop':
            scope.handle_stop()
        else:
            answer(channel, message)


def answer(channel: Channel, message: tuple) -> None:
    """Handles a message the parent may send at any moment, whether the node runs yet or not
    (a remote node hears them while it waits for its executable too): 'metrics', 'members',
    'addresses', 'moved', 'left'. Others ('ping') need nothing."""
    if message[0] == 'metrics':
        channel.send('metrics', message[1], node_metrics.collect())
    elif message[0] == 'members':
        group_handle.publish(message[1])
    elif message[0] == 'addresses':
        address.directory.learn(message[1])
        for key, why in message[2].items():
            address.directory.give_up([key], why)
    elif message[0] == 'moved':  # A peer left these addresses for others (a new pod).
        address.directory.moved_away(message[1])
    elif message[0] == 'left':  # Peers that left for good (their elastic group shrank).
        for key, (value, why) in message[1].items():
            address.directory.retire({key: value}, why)


def bound_addresses(executable: Executable) -> dict[str, str]:
    """The addresses of ``executable`` that this process knows: what its servers bound."""
    found = {a.key: a.known() for a in executable.addresses}
    return {key: value for key, value in found.items() if value is not None}


def _report_failure(channel: Channel, finished: threading.Event, exc: BaseException) -> int:
    text = ''.join(traceback.format_exception(exc))
    # One line here; the launcher shows the traceback, once, where it reports the failure.
    sys.stderr.write(f'node failed: {type(exc).__name__}: {exc} (traceback in the launcher\'s '
                     f'report)\n')
    sys.stderr.flush()
    try:
        exception_bytes = serialization.dumps(exc)
    except Exception:
        exception_bytes = None
    finished.set()
    channel.send('failed', f'{type(exc).__name__}: {exc}', text, exception_bytes)
    return 1


def _import_preloaded_modules() -> None:
    """Imports the modules ``PRELOAD_ENV`` names; call before unpickling node code."""
    for module in filter(None, os.environ.get(PRELOAD_ENV, '').split(',')):
        importlib.import_module(module)


def child_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment plus ``extra``, for a node process it starts.

    Our import path goes first on ``PYTHONPATH``, so the child can unpickle our code.
    """
    env = dict(os.environ)
    env.update(extra or {})
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    env['PYTHONPATH'] = os.pathsep.join(paths + [env.get('PYTHONPATH', '')]).rstrip(os.pathsep)
    return env


def rebuild_exception(exception_bytes: bytes | None) -> BaseException | None:
    """The exception a node process reported, where it can be unpickled here."""
    if exception_bytes is None:
        return None
    try:
        return serialization.loads(exception_bytes)
    except Exception:
        return None


def describe_exit(code: int | None) -> str:
    """``'killed by SIGKILL'`` or ``'exited with code 3'``."""
    if code is not None and code < 0:
        try:
            return f'killed by {signal.Signals(-code).name}'
        except ValueError:
            return f'killed by signal {-code}'
    return f'exited with code {code}'
