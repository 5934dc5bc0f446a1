"""A packed pod as its agent's session: what ``HostAgent`` reads and writes, and who dials in.

``HostAgent`` (``launchers/remote/host_agents.py``) talks to an agent through
a ``subprocess.Popen``'s pipes: ssh or srun. No local command reaches a pod,
so its agent (``node_side/pod_agent.py``) dials the launch's
``AgentListener`` instead, proves the key, and names its pod; ``PodSession``
gives ``HostAgent`` the same ``stdin``/``stdout``/``stderr``/``wait``/``kill``
over that connection. Lines written before the pod has dialed in wait in the
session and go out when it does; ``stderr`` carries what the watch says of the
pod (why it waits, how it ended), which ``HostAgent`` puts in its messages.

    listener = AgentListener('10.0.0.5')
    session = PodSession(name, cluster, program_over=lambda: deployment.finished)
    listener.expect(session)   # Before the pod is created.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import subprocess
import threading
from typing import Callable

from launchpad_py.launchers.kubernetes import pods
from launchpad_py.launchers.kubernetes.api import Cluster
from launchpad_py.node_side import control_channel

_log = logging.getLogger(__name__)
#: How long the session waits, after its connection ended, for the watch to say how the pod
#: ended (why its nodes are gone); a pod still running then is deleted.
VERDICT_S = 10.0


class AgentListener:
    """Where the pod agents of one launch dial in; each is handed to the session awaiting it."""

    def __init__(self, ip: str):
        self._sessions: dict[str, PodSession] = {}
        self._lock = threading.Lock()
        self._server = control_channel.ControlServer((ip, 0), self._on_connect, family='AF_INET')
        self.key = self._server.key
        self.address = self._server.address

    def expect(self, session: 'PodSession') -> None:
        with self._lock:
            self._sessions[session.pod_name] = session

    def _on_connect(self, hello, channel) -> None:
        with self._lock:
            named = isinstance(hello, tuple) and len(hello) == 2 and hello[0] == 'hello'
            session = self._sessions.pop(hello[1], None) if named else None
        if session is None:  # Not a pod we wait for (an old run's, or nobody's).
            channel.close()
            return
        session.connected(channel)

    def close(self) -> None:
        self._server.close()


class _Input:
    """The session's ``stdin``: lines for the agent, held until it has dialed in."""

    def __init__(self, session: 'PodSession'):
        self._session = session

    def write(self, data: bytes) -> None:
        self._session.send(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self._session.end_input()


class _Output:
    """The session's ``stdout``: the agent's lines; ends with the connection, or at once
    where the pod ended (or the program did) before its agent dialed in."""

    def __init__(self, session: 'PodSession'):
        self._session = session

    def readline(self) -> bytes:
        line = self._session.read_line()
        if not line:
            self._session.eof.set()
        return line


class _Notes:
    """The session's ``stderr``: what the watch said of the pod, a line each, then the end."""

    def __init__(self):
        self.lines: queue.Queue[bytes] = queue.Queue()

    def readline(self) -> bytes:
        return self.lines.get()


class PodSession:
    """One run of a packed pod (``-r1`` after a loss), seen as a ``subprocess.Popen``."""

    def __init__(self, pod_name: str, cluster: Cluster, program_over: Callable[[], bool],
                 note: Callable[[str], None]):
        self.pod_name = pod_name
        self._cluster, self._program_over, self._note = cluster, program_over, note
        self.stdin, self.stdout, self.stderr = _Input(self), _Output(self), _Notes()
        self.created = False
        self.eof = threading.Event()  # The agent's output has ended.
        self._ready = threading.Event()  # Dialed in, or never will (ended, killed, over).
        self._ended = threading.Event()  # The watch saw the pod end (or it never will).
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._reader = None
        self._pending: list[bytes] = []
        self._input_ended = False
        self._closing = False  # We end it: its end is nobody's fault.
        self._reason: str | None = None
        self.code: int | None = None
        self.how: str | None = None
        self.taken: str | None = None  # Why the cluster ended it, in its words.
        self.lost_by: str | None = None  # The short reason of that, or 'host_lost'.

    # The connection.

    def connected(self, channel) -> None:
        sock = socket.socket(fileno=os.dup(channel.fileno()))
        channel.close()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            if self._ready.is_set():  # Killed or over before it dialed in.
                sock.close()
                return
            try:
                for data in self._pending:
                    sock.sendall(data)
                if self._input_ended:
                    sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # Gone at once: the reader sees the end.
            self._pending = []
            self._sock, self._reader = sock, sock.makefile('rb')
        self._ready.set()

    def send(self, data: bytes) -> None:
        with self._lock:
            if self._sock is None:
                if not self._input_ended:
                    self._pending.append(data)
                return
            self._sock.sendall(data)  # OSError: HostAgent's writer takes it as the end.

    def end_input(self) -> None:
        """The launcher has nothing more to ask: the agent ends its nodes and exits."""
        with self._lock:
            self._input_ended = True
            self._shut(socket.SHUT_WR)

    def _shut(self, how: int) -> None:
        """We end it (its end is then nobody's fault): shuts the connection's ``how`` side,
        if the agent has dialed in. Called with the lock held."""
        self._closing = True
        if self._sock is not None:
            try:
                self._sock.shutdown(how)
            except OSError:
                pass

    def read_line(self) -> bytes:
        self._ready.wait()
        if self._reader is None:
            return b''
        try:
            return self._reader.readline()
        except (OSError, ValueError):
            return b''

    # How it ends.

    def wait(self, timeout: float | None = None) -> int | None:
        """Once the agent's output has ended: the pod's exit code, as the watch tells it."""
        if not self.eof.wait(timeout):
            raise subprocess.TimeoutExpired(self.pod_name, timeout)
        ours = self._closing or self._program_over()  # Then the agent ended as asked.
        if not ours and not self._ended.wait(VERDICT_S):  # Connection lost; the pod runs on?
            self.lost_by = 'host_lost'
            self.stderr.lines.put(f'the connection to pod {self.pod_name} was lost; '
                                  'deleting it'.encode())
            self.kill()
        with self._lock:
            if self._sock is not None:
                self._reader.close()
                self._sock.close()
        self.stderr.lines.put(b'')
        return self.code

    def kill(self) -> None:
        """Deletes the pod (its agent's nodes end with it) and stops reading."""
        with self._lock:
            self._shut(socket.SHUT_RDWR)
        if self.created and not self._program_over():
            self._cluster.delete_pod(self.pod_name)
        self.close()

    def close(self) -> None:
        """Nothing more will be heard of the pod (the program is over): unblocks readers."""
        self._ready.set()
        self._ended.set()

    def refused(self, why: str) -> None:
        """The API server refused the pod or its Secret: the session ends, saying why."""
        self.how = why
        self._note(why)
        self.stderr.lines.put(why.encode())
        self.close()

    def observe(self, kind: str, pod: dict) -> None:
        """One watch event of the pod: why it waits, how it ended, whether the cluster did it."""
        status = pod.get('status') or {}
        phase = status.get('phase', 'Pending')
        reason = pods.waiting_reason(pod)
        if reason and reason != self._reason:
            self._reason = reason
            text = f'pod {self.pod_name} is {phase.lower()}: {reason}'
            _log.warning('%s', text)
            self._note(text)
            self.stderr.lines.put(text.encode())
        terminated = pods.terminated_state(pod)
        if terminated is not None:
            self.code, self.how = terminated.get('exitCode'), terminated.get('reason')
        ours = self._closing or self._program_over()
        if not ours and self.taken is None:
            verdict = pods.ended_by_cluster(kind, pod, self.pod_name)
            if verdict is not None:
                self.taken, self.lost_by = verdict
        if phase in ('Succeeded', 'Failed') or kind == 'DELETED':
            if not self._ready.is_set():  # It never dialed in: say how it ended.
                self.stderr.lines.put(f'pod {self.pod_name} ended before its agent reached the '
                                      f'launcher ({phase}, {self.how or "no reason"})'.encode())
            self._ended.set()
            self._ready.set()
