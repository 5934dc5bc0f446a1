"""The per-host agent: ``python -m launchpad_py.node_side.host_agent``, one per host and program.

One ssh session (or one Slurm step) per host runs it, instead of one per
node: ssh's cost and sshd's ``MaxStartups`` then grow with hosts, not nodes.
Like the local fork server it imports what every node needs once, then forks
one child per request; each child becomes a node exactly as an exec'd
``remote_node_main`` would (its own session, the bootstrap on its stdin).

Requests arrive on stdin, one JSON object a line (stdin is the launcher's ssh
session, which ssh authenticated; secrets only travel here, never in argv)::

    {"start": ID, "boot": {...}}   fork node ID; its bootstrap (with the program secret)
    {"kill": ID}                   SIGKILL node ID's process group
    {"ping": 1}                    the launcher lives (sent every second)
    {"timeout": SECONDS}           how long without a word before the launcher counts as gone
    {"code": SHA256}               run nodes from this code pack: answers ``c 0 have`` (cached
                                   here, now in use) or ``c 0 need``
    {"pack": SHA256, "data": B64}  the pack itself (after ``need``): ``c 0 ready`` once
                                   checked, unpacked and in use, or ``c 0 error WHY``
    {"remove_checkpoints": NAME}   the program NAME is over: at exit, remove its private
                                   checkpoint directory on this host (with "secret": HEX
                                   where no node's bootstrap brought the program's secret)

Answers go to stdout, one line each: ``o ID text`` (a line of node ID's output),
``s ID PID`` (started), ``x ID CODE`` (exited; CODE is negative for a signal).
The launcher sends nodes only after the code (if any) is in use
(``node_side/code_cache.py``; see ``launchers/remote/code_pack.py``).

Watchdogs: when stdin ends or the pings stop for the timeout (the launcher
sends it first; ``LP_AGENT_TIMEOUT`` until then) because the session, the
launcher or the network is gone, the agent kills every
node's process group and exits. Each node keeps the write end of its
bootstrap pipe open only here, so a node whose agent dies sees its stdin close
and kills its own group (``remote_node_main``).
"""

from __future__ import annotations

import base64
import json
import os
import select
import signal
import sys
import time

from launchpad_py.courier import open_files
from launchpad_py.node_side import checkpoints, code_cache
from launchpad_py.node_side.fork_server import preload, remove_socket_files

#: Seconds without a request or ping after which the agent takes the launcher for gone.
TIMEOUT_ENV = 'LP_AGENT_TIMEOUT'


class _Node:
    """One forked node: its pid, the pipes the agent holds for it, its unfinished output line."""

    def __init__(self, node_id: int, pid: int, pidfd: int, output: int, boot_pipe: int):
        self.id, self.pid, self.pidfd, self.output, self.boot_pipe = (node_id, pid, pidfd,
                                                                      output, boot_pipe)
        self.partial = b''


def _write(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view):]


def _child(boot_read: int, output_write: int, inherited: list[int]) -> None:
    """In the forked child: stdin is the bootstrap pipe, stdout/stderr the output pipe."""
    code = 1
    try:
        os.setsid()
        os.dup2(boot_read, 0)
        os.dup2(output_write, 1)
        os.dup2(output_write, 2)
        for fd in {boot_read, output_write, *inherited} - {0, 1, 2}:
            os.close(fd)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for name in ('SIGTERM', 'SIGHUP'):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
        from launchpad_py.node_side import remote_node_main
        code = remote_node_main.main()
        sys.stdout.flush()
        sys.stderr.flush()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
        if not isinstance(exc.code, int) and exc.code is not None:
            os.write(2, f'{exc.code}\n'.encode())
    except BaseException:  # Reported on the node's own output, like a crashed interpreter.
        import traceback
        traceback.print_exc()
    finally:
        remove_socket_files()
        os._exit(code)


class Agent:
    """The agent's state and its one loop (a single thread, so forking stays safe).

    It holds three descriptors per node, so it polls (``select`` stops at descriptor 1023)
    and raises its soft descriptor limit.
    """

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.nodes: dict[int, _Node] = {}  # by id
        self._by_fd: dict[int, _Node] = {}
        self._poll = select.poll()
        self._poll.register(0, select.POLLIN)
        self._requests: list[bytes] = []  # Chunks of an unfinished line (a pack is long).
        self._last_word = time.monotonic()
        self.secret: bytes | None = None  # The program's, from its nodes' bootstraps.
        #: The program whose private checkpoints go at exit: its launcher said it is over.
        self.finished_program: str | None = None

    def start(self, node_id: int, boot: dict) -> None:
        self.secret = bytes.fromhex(boot['secret'])
        boot_read, boot_write = os.pipe()
        output_read, output_write = os.pipe()
        inherited = [fd for n in self.nodes.values()
                     for fd in (n.pidfd, n.output, n.boot_pipe) if fd >= 0]
        pid = os.fork()
        if pid == 0:
            _child(boot_read, output_write, [boot_write, output_read, *inherited])
        os.close(boot_read)
        os.close(output_write)
        os.set_blocking(output_read, False)  # A stale readiness must never block the loop.
        # The node reads this line, then watches the pipe: its end is the agent's death.
        os.write(boot_write, json.dumps(boot).encode() + b'\n')
        node = _Node(node_id, pid, os.pidfd_open(pid), output_read, boot_write)
        self.nodes[node_id] = node
        for fd in (node.pidfd, node.output):
            self._by_fd[fd] = node
            self._poll.register(fd, select.POLLIN)
        _write(b's %d %d\n' % (node_id, pid))

    def kill(self, node_id: int) -> None:
        node = self.nodes.get(node_id)
        if node is not None:
            try:
                os.killpg(node.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                try:  # Asked before the child made its group (setsid): it has no children yet.
                    os.kill(node.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def kill_all(self) -> None:
        for node_id in list(self.nodes):
            self.kill(node_id)

    def _relay(self, node: _Node) -> None:
        try:
            data = os.read(node.output, 65536)
        except BlockingIOError:
            return
        if not data:
            if node.partial:
                _write(b'o %d %s\n' % (node.id, node.partial))
            self._forget(node.output)
            node.output = -1
            return
        *lines, node.partial = (node.partial + data).split(b'\n')
        _write(b''.join(b'o %d %s\n' % (node.id, line) for line in lines))

    def _reap(self, node: _Node) -> None:
        readable = select.poll()
        if node.output >= 0:
            readable.register(node.output, select.POLLIN)
        while node.output >= 0 and readable.poll(0):
            self._relay(node)  # What it wrote before ending goes before its exit.
        _, status = os.waitpid(node.pid, 0)
        del self.nodes[node.id]
        self._forget(node.pidfd)
        os.close(node.boot_pipe)
        if node.output >= 0:  # Its children may hold the pipe still; stop listening.
            self._forget(node.output)
        _write(b'x %d %d\n' % (node.id, os.waitstatus_to_exitcode(status)))

    def _forget(self, fd: int) -> None:
        del self._by_fd[fd]
        self._poll.unregister(fd)
        os.close(fd)

    def _requests_ready(self) -> bool:
        """Reads stdin; handles whole lines; False once it has ended."""
        data = os.read(0, 1 << 20)
        if not data:
            return False
        self._last_word = time.monotonic()
        self._requests.append(data)
        if b'\n' not in data:
            return True
        *lines, rest = b''.join(self._requests).split(b'\n')
        self._requests = [rest]
        for line in filter(None, lines):
            request = json.loads(line)
            if 'start' in request:
                self.start(request['start'], request['boot'])
            elif 'kill' in request:
                self.kill(request['kill'])
            elif 'timeout' in request:
                self.timeout = float(request['timeout'])
            elif 'code' in request:
                path = code_cache.lookup(request['code'])
                if path is not None:
                    code_cache.activate(path)
                _write(b'c 0 have\n' if path else b'c 0 need\n')
            elif 'pack' in request:
                self._install(request['pack'], request['data'])
            elif 'remove_checkpoints' in request:
                self.finished_program = request['remove_checkpoints']
                if request.get('secret'):
                    self.secret = bytes.fromhex(request['secret'])
        return True

    @staticmethod
    def _install(digest: str, data: str) -> None:
        try:
            code_cache.activate(code_cache.install(digest, base64.b64decode(data)))
        except Exception as exc:  # Told to the launcher, which names the host and fails.
            why = f'{type(exc).__name__}: {exc}'.replace('\n', ' ')
            _write(b'c 0 error %s\n' % why.encode(errors='replace'))
        else:
            _write(b'c 0 ready\n')

    def serve(self) -> None:
        while True:
            waited = self.timeout - (time.monotonic() - self._last_word)
            ready = self._poll.poll(max(0.0, waited) * 1000)
            if not ready and time.monotonic() - self._last_word >= self.timeout:
                # No ping: the launcher or the network is gone.
                os.write(2, f'launchpad_py host agent: no word from the launcher for '
                            f'{self.timeout:.0f}s; ending its {len(self.nodes)} nodes\n'.encode())
                return
            for fd, _ in ready:
                if fd == 0:
                    if not self._requests_ready():
                        return
                elif fd in self._by_fd:
                    node = self._by_fd[fd]
                    self._relay(node) if fd == node.output else self._reap(node)


def main(make_agent=Agent) -> int:
    """Serves requests on stdin until it ends; ``make_agent(timeout)``: the agent (the pod
    agent's adds the program secret to each bootstrap, see ``pod_agent``)."""
    preload()
    open_files.raise_soft_limit()
    from launchpad_py.node_side import remote_node_main  # noqa: F401  (forked children run it)
    agent = make_agent(float(os.environ.get(TIMEOUT_ENV, '10')))

    def end(*_):
        agent.kill_all()
        os._exit(0)

    signal.signal(signal.SIGTERM, end)
    signal.signal(signal.SIGHUP, end)
    try:
        agent.serve()
    except BrokenPipeError:
        pass  # Our stdout (the launcher) is gone: the same as stdin ending.
    finally:
        agent.kill_all()
        if agent.finished_program is not None:  # Not on a lost session: a restart needs them.
            checkpoints.remove_private_root(agent.finished_program, agent.secret)
    return 0


if __name__ == '__main__':
    sys.exit(main())
