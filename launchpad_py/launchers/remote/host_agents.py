"""The launcher's end of a per-host agent (``node_side/host_agent.py``): one session per host.

Starting every node through its own ssh session costs one connection (and one
sshd ``MaxStartups`` slot) per node; a ``HostAgent`` opens one session per host
on its first node, and each node's ``AgentStarter`` (the ``Starter`` the remote
core sees) asks that agent to fork the node, reads its output lines and exit
code from the agent's one stdout, and asks the agent to kill it.

    agent = HostAgent(['ssh', 'h1', 'python -m launchpad_py.node_side.host_agent'], 'h1')
    placement = Placement(agent.argv, 'h1', launcher_ip, starter=AgentStarter(agent))
    ...
    agent.close()  # Its end kills whatever nodes it still runs.

The session's stdin carries the nodes' bootstraps (with the program secret);
whoever writes there is the launcher, as the session's own authentication
(ssh, or Slurm's srun) proves. With a ``CodePack`` (``code_pack.py``) the
agent is first asked whether it holds the pack; only a host without it gets
the bytes, and nodes are started once the agent runs from it.
"""

from __future__ import annotations

import base64
import collections
import itertools
import json
import subprocess
import threading
from typing import Callable

from launchpad_py.launchers.remote import code_pack
from launchpad_py.launchers.remote.setup import HEARTBEAT_S, HEARTBEAT_TIMEOUT_S
from launchpad_py.launchers.remote.worker import Starter
from launchpad_py.node_side import node_process
from launchpad_py.supervision.launch_kit import output

#: The agent kills its nodes after this long without a ping (sent every HEARTBEAT_S): twice a
#: node's own heartbeat timeout, as one late ping now costs a whole host.
AGENT_TIMEOUT_S = 2 * HEARTBEAT_TIMEOUT_S
_CLOSE_TIMEOUT_S = 10.0
#: How long a host may take to say whether it holds the code, and to unpack it.
CODE_TIMEOUT_S = 300.0


class HostAgent:
    """One host's agent process, started by the local command ``argv`` on first use;
    ``code``: the pack its nodes run from (None: they run from the host's own files);
    ``open_session``: where no local command reaches the agent (a packed pod dials back),
    makes its session instead: an object with a ``subprocess.Popen``'s ``stdin``,
    ``stdout``, ``stderr``, ``wait`` and ``kill``."""

    def __init__(self, argv: list[str], host: str, code: code_pack.CodePack | None = None,
                 open_session: Callable[[], subprocess.Popen] | None = None):
        self.argv, self.host, self.code = argv, host, code
        self._open_session = open_session
        self.code_bytes_sent = 0
        self._code_answer: str | None = None
        self._code_settled = threading.Event()
        self._process: subprocess.Popen | None = None
        self._nodes: dict[int, AgentStarter] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._closed = threading.Event()
        self._ended: str | None = None  # How the agent's session ended, once it has.
        self._session: _Session | None = None  # The session open now, or the last one.
        self._errors: collections.deque[str] = collections.deque(maxlen=10)
        self._threads: list[threading.Thread] = []

    def start(self, starter: 'AgentStarter', boot: dict) -> int:
        """Asks the agent to start a node (opening the session first); the node's id there.

        A session that ended without our asking (the host was lost) is opened again
        for the nodes restarted there.
        """
        with self._lock:
            self._ensure_session()
            node_id = next(self._ids)
            self._nodes[node_id] = starter
            starter.session = self._session
        self._send({'start': node_id, 'boot': boot})
        return node_id

    def open(self) -> None:
        """Opens the session now rather than on the first start (a packed pod's agent: all
        pods of a launch are then created at once, not as their first nodes' turns come)."""
        with self._lock:
            self._ensure_session()

    def _ensure_session(self) -> None:
        """Under ``_lock``: the session, opened (again, after a loss) where it is not."""
        if self._closed.is_set():
            raise OSError(f'the agent on {self.host} has ended (closed)')
        if self._ended is not None:
            self._process, self._ended, self._threads = None, None, []
        if self._process is None:
            self._open()
            self._send({'timeout': AGENT_TIMEOUT_S})
            if self.code is not None:
                self._ship_code()

    def _ship_code(self) -> None:
        """Asks whether the host holds the code; sends it if not; waits until it is in use."""
        self._send({'code': self.code.digest})
        if not self._code_settled.wait(CODE_TIMEOUT_S) or self._code_answer != 'ready':
            why = self._code_answer or f'no answer within {CODE_TIMEOUT_S:.0f}s'
            self._ended = f'its code is not in use: {why}'  # No node starts there.
            raise OSError(f'the code pack {self.code.digest[:12]} could not be put in use on '
                          f'{self.host}: {why}')

    def _code_said(self, answer: str) -> None:
        """The agent's answer about the code (``have``, ``need``, ``ready``, ``error ...``)."""
        if answer == 'need':
            line = json.dumps({'pack': self.code.digest,
                               'data': base64.b64encode(self.code.data).decode()})
            self._send_line(line.encode() + b'\n')
            self.code_bytes_sent = len(line) + 1
            return
        if answer in ('have', 'ready'):
            code_pack.record(self.code_bytes_sent)
            answer = 'ready'
        self._code_answer = answer
        self._code_settled.set()

    def kill(self, node_id: int) -> None:
        self._send({'kill': node_id})

    def _open(self) -> None:
        # A session of its own: Ctrl-C in the terminal goes to the launcher, which stops the
        # nodes gracefully, instead of cutting the host's session.
        self._session = _Session()
        if self._open_session is not None:
            self._process = self._open_session()
        else:
            self._process = subprocess.Popen(self.argv, stdin=subprocess.PIPE,
                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                             start_new_session=True)
        # All listed before any starts: a session that ends at once (srun refusing the step)
        # has its reader join the stderr reader, which must be there already.
        self._threads = [threading.Thread(target=target, name=f'lp-agent-{name}-{self.host}',
                                          daemon=True)
                         for target, name in ((self._read, 'read'),
                                              (self._read_errors, 'errors'), (self._ping, 'ping'))]
        for thread in self._threads:
            thread.start()

    def _send(self, request: dict) -> None:
        self._send_line(json.dumps(request).encode() + b'\n')

    def _send_line(self, line: bytes) -> None:
        with self._write_lock:
            try:
                self._process.stdin.write(line)
                self._process.stdin.flush()
            except (OSError, ValueError):
                pass  # The session ended; the reader tells every node.

    def _ping(self) -> None:
        while not self._closed.wait(HEARTBEAT_S) and self._ended is None:
            self._send({'ping': 1})

    def _read_errors(self) -> None:
        for raw in iter(self._process.stderr.readline, b''):
            self._errors.append(raw.decode(errors='replace').rstrip())

    def _read(self) -> None:
        for raw in iter(self._process.stdout.readline, b''):
            kind, node_id, rest = (raw.rstrip(b'\n').split(b' ', 2) + [b'', b''])[:3]
            if kind == b'c' and node_id == b'0' and self.code is not None:
                self._code_said(rest.decode(errors='replace'))
                continue
            if kind not in (b'o', b's', b'x') or not node_id.isdigit():
                # Not the agent's (a login script's echo): kept to explain a failure.
                self._errors.append(raw.decode(errors='replace').rstrip())
                continue
            with self._lock:
                starter = self._nodes.get(int(node_id))
            if starter is None:  # Output of a node that has ended (its children's).
                continue
            if kind == b'o':
                starter.take_line(rest.decode(errors='replace'))
            elif kind == b'x':
                with self._lock:
                    del self._nodes[int(node_id)]
                starter.exited(int(rest), None)
        code = self._process.wait()
        self._threads[1].join(1)  # The stderr reader: its last lines say why.
        errors = '; '.join(line for line in self._errors if line)
        ended = node_process.describe_exit(code) + (f': {errors}' if errors else '')
        if self._code_answer is None:  # A start may wait for the code, holding the lock.
            self._code_answer = f'the agent session ended ({ended})'
        self._code_settled.set()
        ours = self._closed.is_set()
        with self._lock:
            self._session.end(unasked=not ours)
            self._ended = ended
            lost, self._nodes = list(self._nodes.values()), {}
        for starter in lost:
            starter.exited(None, f'the agent session on {self.host} ended ({ended})',
                           host_lost=not ours)

    def close(self, program_over: str | None = None) -> None:
        """Ends the session; the agent then kills every node it still runs. ``program_over``:
        the program's name, once it is over (its private checkpoints on the host go too)."""
        self._closed.set()
        with self._lock:
            process = self._process
        if process is None:
            return
        if program_over is not None:
            self._send({'remove_checkpoints': program_over})
        with self._write_lock:
            try:
                process.stdin.close()
            except OSError:
                pass
        try:
            process.wait(_CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
        for thread in self._threads:
            thread.join(_CLOSE_TIMEOUT_S)


class _Session:
    """One session of a host's agent: whether it has ended, and whether we asked it to."""

    def __init__(self):
        self.unasked = False
        self._ended = threading.Event()

    def end(self, unasked: bool) -> None:
        self.unasked = unasked
        self._ended.set()

    def ended_unasked(self, within: float) -> bool:
        """Whether it ended without our asking, waiting up to ``within`` s for its end."""
        return self._ended.wait(within) and self.unasked


# A node killed by a signal whose agent's session ends unasked this soon after died with it.
SAME_BLOW_S = 1.0


class AgentStarter(Starter):
    """One node, started by its host's agent (see ``HostAgent``)."""

    def __init__(self, agent: HostAgent):
        self.agent = agent
        self.session: _Session | None = None  # Set by the agent when it starts the node.
        self.take_line: Callable[[str], None] | None = None
        self._id: int | None = None
        self._code: int | None = None
        self._lost: str | None = None
        self._host_lost = False
        self._asked_session = False
        self._exited = threading.Event()

    def start(self, boot: dict, sink: output.Sink) -> None:
        self.take_line = sink.take_lines()
        self._id = self.agent.start(self, boot)

    def exited(self, code: int | None, lost: str | None, host_lost: bool = False) -> None:
        """The agent reported the node's end (``lost``: why the agent itself ended first;
        ``host_lost``: its session dropped though the launcher did not end it)."""
        self._code, self._lost, self._host_lost = code, lost, host_lost
        self._exited.set()

    def lost_by(self) -> str | None:
        """'host_lost' when the node ended with its agent's session. A signal that ends the
        agent and its node together (Slurm cancelling the agent's step, the kernel ending a
        pod) can reach the node first: the agent, still alive for a moment, reports its node
        killed, then its session ends. Such a node counts as lost with it, not failed."""
        if not self._host_lost and self._code is not None and self._code < 0 \
                and self.session is not None and not self._asked_session:
            self._asked_session = True  # Once: a plain kill waits here only once.
            self._host_lost = self.session.ended_unasked(SAME_BLOW_S)
        return 'host_lost' if self._host_lost else None

    def wait(self) -> int | None:
        self._exited.wait()
        return self._code

    def terminate(self) -> bool:
        if self._id is None:
            return False
        if not self._exited.is_set():
            self.agent.kill(self._id)
        return True

    def describe_exit(self, code: int | None) -> str:
        return self._lost or super().describe_exit(code)

    needs_heartbeat = False  # The agent is pinged, per host; the node watches its agent.

    def again(self, host: str | None) -> 'AgentStarter':
        return AgentStarter(self.agent)  # The same host's agent starts it again.
