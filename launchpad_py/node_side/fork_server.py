"""The fork server process: ``python -m launchpad_py.node_side.fork_server FD LAUNCHER_PID``.

It imports what every node needs, then forks one child per request that
arrives on the socket ``FD`` (see ``launchers/local/process_starter.py`` for the launcher's
end). Each request carries the child's stdout, stderr and control channel;
the answer carries a pidfd of the child, and its exit code follows when the
server reaps it. The children outlive the server: they end with their
launcher through their control channel, not with their parent.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import socket
import sys

#: The largest request or answer on the fork server's socket (the launcher's end reads it too).
MAX_MESSAGE = 1 << 20


def preload() -> None:
    """Imports what every node needs; creates no gRPC object and starts no thread.

    Then freezes what it made: children's garbage collections leave the inherited
    objects alone, so their pages stay shared instead of being copied (≈1 MiB a node);
    and takes the free chunks of its heap, so that children's allocations do not copy its
    pages either (``heap_holes``, ≈700 KiB a node).
    """
    import launchpad_py  # (first: it sets gRPC's log level)
    from launchpad_py.node_side import local_node_main  # noqa: F401
    # ``import launchpad_py`` loads its public names lazily (for lean pods); here every child
    # would then import the node types, courier server and the rest itself, after the fork.
    for name in launchpad_py.__all__:
        getattr(launchpad_py, name)

    import absl.flags  # noqa: F401
    import cloudpickle  # noqa: F401
    import grpc  # noqa: F401
    import numpy  # noqa: F401
    import portpicker  # noqa: F401
    # What a courier server imports when it is made, not when its module is: imported in each
    # node after its fork they were 2 of its 9 MiB of unique memory (1,000 nodes: 2 GiB).
    import concurrent.futures.thread  # noqa: F401
    import grpc._interceptor  # noqa: F401
    import grpc._server  # noqa: F401
    import grpc._utilities  # noqa: F401
    from launchpad_py.courier.transports import grpc_server  # noqa: F401
    import gc
    gc.collect()
    gc.freeze()
    from launchpad_py.node_side import heap_holes
    heap_holes.take()


def _child(fds: list[int], spec_path: str, env_changes: tuple[dict, list], cwd: str,
           inherited: list[int]) -> None:
    """In the forked child: becomes a node process like an exec'd one, then runs it.

    ``fds`` are its stdout, stderr and control channel; ``env_changes`` what its environment
    sets and unsets against the server's at its start (``process_starter.env_changes``);
    ``inherited`` are the server's own descriptors, closed here.
    """
    code = 1
    try:
        for extra in inherited:
            os.close(extra)
        stdout_fd, stderr_fd, control_fd = fds
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(stdout_fd, 1)
        os.dup2(stderr_fd, 2)
        for extra in {null, stdout_fd, stderr_fd} - {0, 1, 2}:
            os.close(extra)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.chdir(cwd)
        _set_environment(*env_changes)
        from launchpad_py.node_side import local_node_main
        # Our parent is the fork server, whose death must not end us: no PDEATHSIG here,
        # the control channel tells us when the launcher is gone.
        code = local_node_main.main(spec_path, control_fd, die_with_parent=False)
        sys.stdout.flush()
        sys.stderr.flush()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # Reported on the node's own stderr, like a crashed interpreter.
        import traceback
        traceback.print_exc()
    finally:
        remove_socket_files()  # What an interpreter's exit would do; os._exit does not.
        os._exit(code)


#: What ``preload`` changed in the server's environment: {name: value before, None if unset}.
_drift: dict[str, str | None] = {}


def _set_environment(changed: dict[str, str], unset: list[str]) -> None:
    """Makes the environment the launcher asked for, writing only the names that differ.

    The server's environment is the launcher's as it started the server, plus what
    ``preload`` changed; clearing and refilling ``os.environ`` rewrote every name and value.
    """
    for name, value in _drift.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    for name in unset:
        os.environ.pop(name, None)
    os.environ.update(changed)
    # What importing courier set in the server's environment, set again (gRPC reads it later).
    os.environ.setdefault('GRPC_VERBOSITY', 'ERROR')


def _preload_noting_drift() -> None:
    """``preload``, noting in ``_drift`` what it changed in the environment."""
    before = dict(os.environ)
    preload()
    after = dict(os.environ)
    _drift.update({name: before.get(name) for name in before.keys() | after.keys()
                   if before.get(name) != after.get(name)})


def remove_socket_files() -> None:
    try:
        from launchpad_py.courier.transports import uds_server
        uds_server.remove_socket_files()
    except BaseException:  # Nothing may keep a forked child from exiting.
        pass


def _serve(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    children: dict[int, int] = {}  # pidfd -> pid
    # poll, not select: past ~1,000 children their pidfds pass select's limit of 1,024.
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while True:
        ready = [ready_fd for ready_fd, _ in poller.poll()]
        for pidfd in [r for r in ready if r != fd]:
            poller.unregister(pidfd)
            pid = children.pop(pidfd)
            os.close(pidfd)
            _, status = os.waitpid(pid, 0)
            if not _answer(sock, ('exited', pid, os.waitstatus_to_exitcode(status))):
                return
        if fd not in ready:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 3)
        except OSError:
            data = b''
        if not data:
            return  # The launcher closed us; our children run on (it watches their channels).
        _, request_id, spec_path, env_changes, cwd = pickle.loads(data)
        try:
            pid = os.fork()
        except OSError as exc:
            for extra in fds:
                os.close(extra)
            if not _answer(sock, ('failed', request_id, f'fork failed: {exc}')):
                return
            continue
        if pid == 0:
            _child(fds, spec_path, env_changes, cwd, [fd, *children])
        for extra in fds:
            os.close(extra)
        pidfd = os.pidfd_open(pid)
        children[pidfd] = pid
        poller.register(pidfd, select.POLLIN)
        # The launcher gets the pidfd too: it tells when the child ends, even after we die.
        if not _answer(sock, ('started', request_id, pid), pidfd):
            return


def _answer(sock: socket.socket, message: tuple, pidfd: int | None = None) -> bool:
    """Sends ``message`` (with ``pidfd``) to the launcher; False when it has closed its end
    (at a stop, while children still end): the server then ends quietly, the children run on."""
    try:
        socket.send_fds(sock, [pickle.dumps(message)], [] if pidfd is None else [pidfd])
    except (BrokenPipeError, ConnectionResetError):
        return False
    return True


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
    _preload_noting_drift()
    _serve(int(sys.argv[1]))
