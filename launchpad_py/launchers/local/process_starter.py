"""Starts node processes by forking a warm interpreter instead of exec-ing a new one.

A new interpreter spends most of a node's start importing launchpad_py,
grpc, numpy and cloudpickle; with 100 nodes on a few cores that dominates
launch time. The fork server (``node_side/fork_server.py``; this module is the
launcher's end) is one process per program that has imported
them (and created nothing else: no gRPC object, no thread, so forking it is
safe) and forks one child per node. Each child starts its own session, takes
the stdout/stderr it is handed, sets its environment and runs the worker
entry point, exactly as an exec'd worker would.

    server = ForkServer.start(env, die_with_parent=True)
    process = server.spawn(spec_path, env, cwd, stdout_fd, stderr_fd, control_fd)
    process.pid; process.wait()

A launch uses ``ask`` instead, which returns before the server answers: the
requests of 1,000 nodes then go out back to back, not one round trip (and one
wake-up of a busy server) per node.

Nodes outlive the server: if it dies (the OOM killer picks big processes),
running nodes go on, and the next ``spawn`` starts a new server.

Nodes whose group needs a different interpreter, or environment variables
that only take effect when an interpreter starts (``PYTHON*``, ``LD_*``,
``MALLOC_*``), are exec'd as before (see ``can_fork``).
"""

from __future__ import annotations

import itertools
import os
import pickle
import select
import socket
import subprocess
import sys
import threading
from typing import Callable

from launchpad_py.node_side.fork_server import MAX_MESSAGE

_EXEC_TIME_PREFIXES = ('PYTHON', 'LD_', 'MALLOC_', 'GLIBC_')


def can_fork(interpreter: str, extra_env: dict[str, str]) -> bool:
    """Whether a node with this interpreter and group env may be forked from the server."""
    # Paths, not files: a venv's python links to the base one but has its own sys.path.
    if os.path.abspath(interpreter) != os.path.abspath(sys.executable):
        return False
    return not any(key.startswith(_EXEC_TIME_PREFIXES) for key in extra_env)


class ForkedProcess:
    """A node asked of the server; ``wait()`` returns its exit code like ``Popen.wait``.

    Its pid is known once the server answers (``wait_started``): asking does not
    wait for the answer, so a launch sends its requests back to back and the
    server forks them without a round trip each. The exit code is None when the
    node ended after its fork server died (only the server, its parent, could
    learn it), or when it never started (``start_error`` says why).
    """

    def __init__(self):
        self.pid: int | None = None
        self.stdout = None
        self.returncode: int | None = None
        self.start_error: str | None = None
        self._pidfd: int | None = None
        self._started = threading.Event()
        self._exited = threading.Event()

    def wait_started(self, timeout: float | None = None) -> int:
        """The pid, once the server forked it; OSError if it could not, or did not answer."""
        if not self._started.wait(timeout):
            raise OSError(f'the fork server did not answer in {timeout}s')
        if self.pid is None:
            raise OSError(self.start_error)
        return self.pid

    def wait(self) -> int | None:
        self._exited.wait()
        return self.returncode

    def _set_started(self, pid: int, pidfd: int) -> None:
        self.pid, self._pidfd = pid, pidfd
        self._started.set()

    def _set_failed(self, reason: str) -> None:
        self.start_error = reason
        self._started.set()
        self._set_exit(None)

    def _set_exit(self, code: int | None) -> None:
        if self._exited.is_set():
            return
        self.returncode = code
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        self._exited.set()


def env_changes(base: dict[str, str], env: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """What ``env`` sets and unsets against ``base`` (the environment the server started with).

    Usually nothing: a whole environment in each request was ~70 strings that the server
    unpickled into free slots all over its inherited memory, 77 pages written per fork
    that each child then held alone (measured in stop 44).
    """
    return {k: v for k, v in env.items() if base.get(k) != v}, [k for k in base if k not in env]


class ForkServer:
    """The launcher's end: asks the server for children and learns when they exit.

    If the server process dies, its children keep running (they are watched
    through their pidfds from then on), requests in flight fail at once,
    ``on_death`` hears why, and the next ``spawn`` starts a new server.
    """

    def __init__(self, env: dict[str, str], die_with_parent: bool,
                 on_death: Callable[[str], None] | None = None):
        self._env = env
        self._die_with_parent = die_with_parent
        self._on_death = on_death
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._asked: dict[int, ForkedProcess] = {}  # Request id -> its process, unanswered.
        self._children: dict[int, ForkedProcess] = {}
        self._early_exits: dict[int, int] = {}
        self._closing = False
        self._running = False  # The current server process has not been seen to end.
        self._process: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._reader: threading.Thread | None = None
        self._start_process()

    @classmethod
    def start(cls, env: dict[str, str], die_with_parent: bool,
              on_death: Callable[[str], None] | None = None) -> 'ForkServer':
        """Starts the server process (it imports the heavy modules while we go on)."""
        return cls(env, die_with_parent, on_death)

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def alive(self) -> bool:
        return self._running

    def _start_process(self) -> None:
        """Runs a server in our working directory, as the nodes do, so ``sys.path`` agrees."""
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # PDEATHSIG follows the thread that forked, so only the main thread may ask for it.
        die_with = (os.getpid() if self._die_with_parent
                    and threading.current_thread() is threading.main_thread() else 0)
        with child:
            self._process = subprocess.Popen(
                [sys.executable, '-m', 'launchpad_py.node_side.fork_server',
                 str(child.fileno()), str(die_with)], pass_fds=[child.fileno()], env=self._env,
                cwd=os.getcwd(), stdin=subprocess.DEVNULL, start_new_session=True)
        self._sock = parent
        self._running = True
        self._reader = threading.Thread(target=self._read, args=(parent, self._process),
                                        name='lp-fork-server', daemon=True)
        self._reader.start()

    def spawn(self, spec_path: str, env: dict[str, str], cwd: str, stdout_fd: int,
              stderr_fd: int, control_fd: int, timeout: float = 120.0) -> ForkedProcess:
        """Forks a node that runs ``spec_path``, talking to its launcher over ``control_fd``;
        returns once it runs (``ask`` and ``wait_started``)."""
        process = self.ask(spec_path, env, cwd, stdout_fd, stderr_fd, control_fd)
        process.wait_started(timeout)
        return process

    def ask(self, spec_path: str, env: dict[str, str], cwd: str, stdout_fd: int,
            stderr_fd: int, control_fd: int) -> ForkedProcess:
        """Asks for a node without waiting for the answer; the descriptors may be closed
        on return (the request carries copies)."""
        process = ForkedProcess()
        request_id = next(self._ids)
        with self._lock:
            if self._closing:
                raise OSError('the fork server is closed')
            if not self.alive:
                self._start_process()
            self._asked[request_id] = process
            sock = self._sock
        message = pickle.dumps(('spawn', request_id, spec_path, env_changes(self._env, env), cwd))
        try:
            socket.send_fds(sock, [message], [stdout_fd, stderr_fd, control_fd])
        except OSError:
            pass  # The server is gone: its reader answers every request in flight.
        return process

    def ask_like_popen(self, spec_path: str, env: dict[str, str], cwd: str,
                       streams: dict, control_fd: int) -> ForkedProcess:
        """``ask`` with ``Popen``-style ``stdout``/``stderr`` (PIPE, a file, STDOUT, unset)."""
        stdout, read_end = streams.get('stdout'), None
        if stdout is subprocess.PIPE:
            read_end, out_fd = os.pipe()
        else:
            out_fd = stdout.fileno() if stdout is not None else sys.stdout.fileno()
        err_fd = out_fd if streams.get('stderr') is subprocess.STDOUT else sys.stderr.fileno()
        try:
            process = self.ask(spec_path, env, cwd, out_fd, err_fd, control_fd)
        except OSError:
            if read_end is not None:
                os.close(read_end)
            raise
        finally:
            if read_end is not None:
                os.close(out_fd)
        if read_end is not None:
            process.stdout = os.fdopen(read_end, 'rb')
        return process

    def _read(self, sock: socket.socket, server: subprocess.Popen) -> None:
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 1)
            except OSError:
                data, fds = b'', []
            if not data:
                break
            self._take(*pickle.loads(data), fds)
        sock.close()
        self._server_gone(server)

    def _take(self, kind: str, key: int, value, fds: list[int]) -> None:
        early, process = None, None
        with self._lock:
            if kind in ('started', 'failed'):
                process = self._asked.pop(key)
                if kind == 'started':
                    self._children[value] = process
                    early = self._early_exits.pop(value, None)
            else:  # 'exited': key is the pid.
                process = self._children.pop(key, None)
                if process is None:
                    self._early_exits[key] = value
        if kind == 'started':
            process._set_started(value, fds[0])
            if early is not None:
                process._set_exit(early)
        elif kind == 'failed':
            process._set_failed(value)
        elif process is not None:
            process._set_exit(value)

    def _server_gone(self, server: subprocess.Popen) -> None:
        """The server ended: fail requests in flight, keep watching its children."""
        from launchpad_py.node_side.node_process import describe_exit
        reason = f'the fork server (pid {server.pid}) died: {describe_exit(server.wait())}'
        with self._lock:  # From here on, spawn starts a new server instead of queueing.
            self._running = False
            pending, self._asked = list(self._asked.values()), {}
            orphans, self._children = list(self._children.values()), {}
            closing = self._closing
        for process in pending:
            process._set_failed(reason)
        if orphans:
            threading.Thread(target=_watch_orphans, args=(orphans,), name='lp-fork-orphans',
                             daemon=True).start()
        if not closing and self._on_death is not None:
            self._on_death(reason)

    def close(self) -> None:
        with self._lock:
            self._closing = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._reader.join(timeout=10)


def _watch_orphans(orphans: list[ForkedProcess]) -> None:
    """Reports each child of a dead server as ended (code unknown) when its pidfd says so."""
    waiting = {process._pidfd: process for process in orphans if process._pidfd is not None}
    poller = select.poll()  # Not select: a thousand pidfds pass its limit of 1,024.
    for pidfd in waiting:
        poller.register(pidfd, select.POLLIN)
    while waiting:
        for pidfd, _ in poller.poll():
            poller.unregister(pidfd)
            waiting.pop(pidfd)._set_exit(None)
