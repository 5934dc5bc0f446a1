"""Starts node processes by forking a warm interpreter instead of exec-ing a new one.

A new interpreter spends most of a node's start importing launchpad_py,
grpc, numpy and cloudpickle; with 100 nodes on a few cores that dominates
launch time. The fork server is one process per program that has imported
them (and created nothing else: no gRPC object, no thread, so forking it is
safe) and forks one child per node. Each child starts its own session, takes
the stdout/stderr it is handed, sets its environment and runs the worker
entry point, exactly as an exec'd worker would.

    server = ForkServer.start(env, die_with_parent=True)
    process = server.spawn(spec_path, env, cwd, stdout_fd, stderr_fd)
    process.pid; process.wait()

Nodes whose group needs a different interpreter, or environment variables
that only take effect when an interpreter starts (``PYTHON*``, ``LD_*``,
``MALLOC_*``), are exec'd as before (see ``can_fork``).
"""

from __future__ import annotations

import itertools
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import threading

_EXEC_TIME_PREFIXES = ('PYTHON', 'LD_', 'MALLOC_', 'GLIBC_')
_MAX_MESSAGE = 1 << 20


def can_fork(interpreter: str, extra_env: dict[str, str]) -> bool:
    """Whether a node with this interpreter and group env may be forked from the server."""
    # Paths, not files: a venv's python links to the base one but has its own sys.path.
    if os.path.abspath(interpreter) != os.path.abspath(sys.executable):
        return False
    return not any(key.startswith(_EXEC_TIME_PREFIXES) for key in extra_env)


class ForkedProcess:
    """A node forked by the server; ``wait()`` returns its exit code like ``Popen.wait``."""

    def __init__(self, pid: int):
        self.pid = pid
        self.stdout = None
        self.returncode: int | None = None
        self._exited = threading.Event()

    def wait(self) -> int:
        self._exited.wait()
        return self.returncode

    def _set_exit(self, code: int) -> None:
        self.returncode = code
        self._exited.set()


class ForkServer:
    """The launcher's end: asks the server for children and learns when they exit."""

    def __init__(self, process: subprocess.Popen, sock: socket.socket):
        self._process = process
        self._sock = sock
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._started: dict[int, tuple[threading.Event, list]] = {}
        self._children: dict[int, ForkedProcess] = {}
        self._early_exits: dict[int, int] = {}
        self._reader = threading.Thread(target=self._read, name='lp-fork-server', daemon=True)
        self._reader.start()

    @classmethod
    def start(cls, env: dict[str, str], die_with_parent: bool) -> 'ForkServer':
        """Starts the server process (it imports the heavy modules while we go on).

        It runs in our working directory, as the nodes do, so relative entries
        of ``sys.path`` resolve the same way in both.
        """
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        process = subprocess.Popen(
            [sys.executable, '-m', 'launchpad_py.launchers.process_starter', str(child.fileno()),
             str(os.getpid() if die_with_parent else 0)], pass_fds=[child.fileno()], env=env,
            cwd=os.getcwd(),
            stdin=subprocess.DEVNULL, start_new_session=True)
        child.close()
        return cls(process, parent)

    def spawn(self, spec_path: str, env: dict[str, str], cwd: str, stdout_fd: int,
              stderr_fd: int, timeout: float = 120.0) -> ForkedProcess:
        request_id = next(self._ids)
        done, answer = threading.Event(), []
        with self._lock:
            self._started[request_id] = (done, answer)
        message = pickle.dumps(('spawn', request_id, spec_path, env, cwd))
        socket.send_fds(self._sock, [message], [stdout_fd, stderr_fd])
        if not done.wait(timeout) or not answer or isinstance(answer[0], str):
            raise OSError(f'the fork server did not start the node: '
                          f'{answer[0] if answer else "no answer"}')
        return answer[0]

    def spawn_like_popen(self, spec_path: str, env: dict[str, str], cwd: str,
                         streams: dict) -> ForkedProcess:
        """``spawn`` with ``Popen``-style ``stdout``/``stderr`` (PIPE, a file, STDOUT, unset)."""
        stdout, read_end = streams.get('stdout'), None
        if stdout is subprocess.PIPE:
            read_end, out_fd = os.pipe()
        else:
            out_fd = stdout.fileno() if stdout is not None else sys.stdout.fileno()
        err_fd = out_fd if streams.get('stderr') is subprocess.STDOUT else sys.stderr.fileno()
        try:
            process = self.spawn(spec_path, env, cwd, out_fd, err_fd)
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

    def _read(self) -> None:
        while True:
            try:
                data = self._sock.recv(_MAX_MESSAGE)
            except OSError:
                data = b''
            if not data:
                break
            kind, key, value = pickle.loads(data)
            with self._lock:
                if kind == 'started':
                    process = ForkedProcess(value)
                    self._children[value] = process
                    done, answer = self._started.pop(key)
                    answer.append(process)
                    early = self._early_exits.pop(value, None)
                elif kind == 'failed':
                    done, answer = self._started.pop(key)
                    answer.append(value)
                else:  # 'exited': key is the pid.
                    process = self._children.pop(key, None)
                    if process is None:
                        self._early_exits[key] = value
                    else:
                        process._set_exit(value)
                    continue
            done.set()
            if kind == 'started' and early is not None:
                process._set_exit(early)
        # The server is gone, so were its children (they die with it).
        with self._lock:
            children, self._children = list(self._children.values()), {}
        for process in children:
            process._set_exit(-signal.SIGKILL)

    def close(self) -> None:
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


# -- the server process ------------------------------------------------------------


def _preload() -> None:
    """Imports what every node needs; creates no gRPC object and starts no thread."""
    import launchpad_py  # noqa: F401  (first: it sets gRPC's log level)
    from launchpad_py.launchers import worker  # noqa: F401

    import absl.flags  # noqa: F401
    import cloudpickle  # noqa: F401
    import grpc  # noqa: F401
    import numpy  # noqa: F401
    import portpicker  # noqa: F401


def _child(fd: int, stdout_fd: int, stderr_fd: int, spec_path: str, env: dict, cwd: str) -> None:
    """In the forked child: becomes a node process like an exec'd one, then runs it."""
    code = 1
    try:
        os.close(fd)
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(stdout_fd, 1)
        os.dup2(stderr_fd, 2)
        for extra in {null, stdout_fd, stderr_fd} - {0, 1, 2}:
            os.close(extra)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        # What importing courier set in the server's environment, set again (gRPC reads it later).
        os.environ.setdefault('GRPC_VERBOSITY', 'ERROR')
        from launchpad_py.launchers import worker
        code = worker.main(spec_path, parent_pid=os.getppid())
        sys.stdout.flush()
        sys.stderr.flush()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # Reported on the node's own stderr, like a crashed interpreter.
        import traceback
        traceback.print_exc()
    finally:
        os._exit(code)


def _serve(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    children: dict[int, int] = {}  # pidfd -> pid
    while True:
        ready, _, _ = select.select([sock, *children], [], [])
        for pidfd in [r for r in ready if r is not sock]:
            pid = children.pop(pidfd)
            os.close(pidfd)
            _, status = os.waitpid(pid, 0)
            sock.send(pickle.dumps(('exited', pid, os.waitstatus_to_exitcode(status))))
        if sock not in ready:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, _MAX_MESSAGE, 2)
        except OSError:
            data = b''
        if not data:
            return  # The launcher closed us (its children die with us: PDEATHSIG).
        _, request_id, spec_path, env, cwd = pickle.loads(data)
        try:
            pid = os.fork()
        except OSError as exc:
            sock.send(pickle.dumps(('failed', request_id, f'fork failed: {exc}')))
            for extra in fds:
                os.close(extra)
            continue
        if pid == 0:
            _child(fd, fds[0], fds[1], spec_path, env, cwd)
        for extra in fds:
            os.close(extra)
        children[os.pidfd_open(pid)] = pid
        sock.send(pickle.dumps(('started', request_id, pid)))


def _die_with(parent_pid: int) -> None:
    import ctypes
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:
        os._exit(1)


if __name__ == '__main__':
    if int(sys.argv[2]):
        _die_with(int(sys.argv[2]))
    _preload()
    _serve(int(sys.argv[1]))
