"""The supervisor of a ``MultiProcessingColocation``: one child process per colocated node.

The supervisor is the colocation's own executable, so any launcher runs it
like any node. It starts each child as ``python -m
launchpad_py.nodes.colocation_child FD`` in its own process group (so a
launcher that kills the group kills the children too), talks to it over a
socket pair, reports ready once every child is ready, relays a child's
``lp.stop()`` to the program, restarts a failed child up to the retry count
(an ``lp.Restart`` policy with a short backoff, the launchers' own code),
passes group handles' member tables on to the children, answers their
questions for addresses from its own (see ``program.address``), and stops every
child when the program stops.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing.connection as mpc
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time

from launchpad_py.node_side import devices, flag_transfer, node_process, runtime
from launchpad_py import errors, flags
from launchpad_py.program import failure_policy
from launchpad_py.courier import serialization
from launchpad_py.node_side.node_process import Channel
from launchpad_py.program import address, group_handle
from launchpad_py.program.node import ExecutionContext, Executable

_log = logging.getLogger(__name__)
_STOP_TIMEOUT_S = 10.0  # How long a failing colocation waits for its other children.
# Children restart quickly (they are one node's parts), yet a crash loop still backs off.
_BACKOFF_S = (0.05, 5.0)


@dataclasses.dataclass
class RunProcesses:
    """The executable body of a ``MultiProcessingColocation``."""

    children: list[Executable]
    retries: int

    def __call__(self, context: ExecutionContext) -> None:
        _Supervisor(self.children, self.retries, context, runtime.current_scope()).run()


class _Child:
    """One colocated node and the process currently running it."""

    def __init__(self, executable: Executable):
        self.executable = executable
        self.data = serialization.dumps(executable)
        self.process: subprocess.Popen | None = None
        self.channel: Channel | None = None
        self.generation = 0
        self.restarts = 0
        self.ready = False
        self.ended = False


class _Supervisor:
    def __init__(self, children: list[Executable], retries: int, context: ExecutionContext,
                 scope: runtime.ProgramScope):
        self._children = [_Child(executable) for executable in children]
        self._policy = failure_policy.Restart(max_restarts=retries, backoff=_BACKOFF_S)
        self._restarts_due = failure_policy.Alarms()
        self._members: group_handle.Table = {}
        self._context = context
        self._scope = scope
        self._events: queue.Queue = queue.Queue()
        # Children get this process's flags and log as it does. A node process's output
        # is labelled by its launcher; a thread's (local_mt) is not, so children label it.
        self._setup = flag_transfer.capture()
        self._label_lines = runtime.process_node() is None
        self._stopping = False
        self._kill_at: float | None = None
        self._reported_ready = False
        # Children share this process's GPUs: several must not each preallocate them.
        sees_gpus = devices.visible_gpus(os.environ.get('CUDA_VISIBLE_DEVICES')) != frozenset()
        self._gpu_sharing = (devices.sharing_environment(os.environ)
                             if sees_gpus and len(children) > 1 else {})

    def run(self) -> None:
        threading.Thread(target=self._watch_stop, daemon=True,
                         name=f'lp-colocation-{self._context.label}/{self._context.index}').start()
        self._members = group_handle.subscribe(self._forward_members)
        address.directory.retired_listeners.append(self._forward_left)
        address.directory.moved_listeners.append(self._forward_moved)
        try:
            for child in self._children:
                self._start(child)
            while not all(child.ended for child in self._children):
                self._handle(*self._next_event())
        finally:
            group_handle.unsubscribe(self._forward_members)
            address.directory.retired_listeners.remove(self._forward_left)
            address.directory.moved_listeners.remove(self._forward_moved)
            self._end_children()

    def _forward_members(self, table: group_handle.Table) -> None:
        """The launcher told us of new group members: so are the children."""
        self._members = {**self._members, **table}
        self._tell_children('members', table)

    def _forward_left(self, left: dict[str, tuple[str, str]]) -> None:
        """Peers left for good (``Directory.retire``): the children's calls to them must fail
        at once too, not wait for them to come back."""
        self._tell_children('left', left)

    def _forward_moved(self, moved: list[str]) -> None:
        """Peers left these addresses for others (a restarted pod): the children's calls
        waiting there must fail at once too, and ask where the peer went."""
        self._tell_children('moved', moved)

    def _tell_children(self, *message) -> None:
        """Sends ``message`` to every child that has been started."""
        for child in self._children:
            if child.channel is not None:
                child.channel.send(*message)

    def _watch(self, channel: Channel, token: str) -> None:
        """A child uses a group handle: we ask our launcher for its tables, which we pass on
        (``_forward_members``); one we have already goes to the child now."""
        group_handle.watch(token)
        entry = self._members.get(token)
        if entry is not None:
            channel.send('members', {token: entry})

    def _next_event(self):
        """The next event; restarts children that are due, and once the children's grace
        after a stop ran out, kills them."""
        while True:
            waits = [w for w in (self._restarts_due.wait_time(), None if self._kill_at is None
                                 else max(0.0, self._kill_at - time.monotonic())) if w is not None]
            try:
                return self._events.get(timeout=min(waits) if waits else None)
            except queue.Empty:
                for child in self._restarts_due.pop_due():
                    self._start(child)
                if self._kill_at is not None and time.monotonic() >= self._kill_at:
                    self._kill_at = None
                    self._kill_running()

    def _kill_running(self) -> None:
        for child in self._children:
            if child.process is not None and child.process.poll() is None:
                child.process.send_signal(signal.SIGKILL)

    def _watch_stop(self) -> None:
        self._context.stop_event.wait()
        self._events.put(('stop', None, None, None))

    def _start(self, child: _Child) -> None:
        ours, theirs = socket.socketpair()
        with theirs:
            child.process = subprocess.Popen(
                [sys.executable, '-m', 'launchpad_py.nodes.colocation_child', str(theirs.fileno())],
                pass_fds=[theirs.fileno()], env=node_process.child_environment(self._gpu_sharing),
                stdin=subprocess.DEVNULL)
        child.channel = Channel(mpc.Connection(ours.detach()))
        child.generation += 1
        child.channel.send('start', child.data, self._context.bind_host, self._scope.name,
                           os.getpid(), self._setup, self._label_lines, self._scope.secret,
                           node_process.bound_addresses(child.executable))
        if self._members:
            child.channel.send('members', self._members)
        left = address.directory.left()  # Those that left before this child (re)started.
        if left:
            child.channel.send('left', left)
        moved = address.directory.moved()  # Likewise, addresses peers left for others.
        if moved:
            child.channel.send('moved', moved)
        threading.Thread(target=self._read, args=(child, child.generation, child.process,
                                                   child.channel),
                         name=f'lp-colocated-{child.executable.label}/{child.executable.index}',
                         daemon=True).start()

    def _read(self, child: _Child, generation: int, process: subprocess.Popen,
              channel: Channel) -> None:
        failure, finished = None, False
        while True:
            try:
                message = channel.recv()
            except (EOFError, OSError):
                break
            if message[0] == 'ready':
                address.directory.learn(message[1])  # Ours now too: we report them up.
                self._events.put(('ready', child, generation, None))
            elif message[0] == 'resolve':
                threading.Thread(target=_answer, args=(channel, message[1]), daemon=True,
                                 name='lp-colocation-addresses').start()
            elif message[0] == 'watch':
                self._watch(channel, message[1])
            elif message[0] == 'relocate':
                threading.Thread(target=_answer_relocation, args=(channel, message[1]),
                                 daemon=True, name='lp-colocation-addresses').start()
            elif message[0] == 'stop_program':
                self._scope.request_program_stop()
            elif message[0] == 'failed':
                failure = message[1:]
            elif message[0] == 'finished':
                finished = True
        code = process.wait()
        channel.close()
        self._events.put(('exited', child, generation, (code, failure, finished)))

    def _handle(self, kind: str, child: _Child | None, generation: int | None, payload) -> None:
        if kind == 'stop':
            self._stopping = True
            self._kill_at = time.monotonic() + _children_grace()
            for other in self._children:
                if other in self._restarts_due:  # Not running: it ends here.
                    self._restarts_due.cancel(other)
                    other.ended = True
                elif not other.ended:
                    other.channel.send('stop')
        elif kind == 'ready' and generation == child.generation:
            child.ready = True
            self._report_ready_when_all_are()
        elif kind == 'exited':
            self._on_exit(child, *payload)

    def _report_ready_when_all_are(self) -> None:
        if not self._reported_ready and all(c.ready or c.ended for c in self._children):
            self._reported_ready = True
            self._context.report_ready()

    def _on_exit(self, child: _Child, code: int, failure: tuple | None, finished: bool) -> None:
        if finished or self._stopping or (code == 0 and failure is None):
            child.ended = True
            self._report_ready_when_all_are()
            return
        if self._policy.allows(child.restarts):
            delay = self._policy.delay(child.restarts)
            child.restarts += 1
            _log.warning('%s failed (%s); restart %d of %d in %.2fs', child.executable.description,
                         _summary(code, failure), child.restarts, self._policy.max_restarts, delay)
            self._restarts_due.set(child, time.monotonic() + delay)
            return
        child.ended = True
        raise self._failure_error(child, code, failure)

    def _failure_error(self, child: _Child, code: int, failure: tuple | None) -> Exception:
        summary = _summary(code, failure)
        text = failure[1] if failure else summary
        restarts = f' after {child.restarts} restarts' if child.restarts else ''
        error = errors.NodeFailedError(
            child.executable.label, child.executable.index, text,
            f'{child.executable.description}, colocated in a process of its own, failed'
            f'{restarts}: {summary}')
        error.__cause__ = node_process.rebuild_exception(failure[2]) if failure else None
        return error

    def _end_children(self) -> None:
        """Stops the children still running (after a failure), then kills stragglers."""
        running = [c for c in self._children if c.process is not None and c.process.poll() is None]
        for child in running:
            child.channel.send('stop')
        deadline = time.monotonic() + _STOP_TIMEOUT_S
        for child in running:
            try:
                child.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.process.send_signal(signal.SIGKILL)
                child.process.wait()


def _answer(channel: Channel, keys: list[str]) -> None:
    """Tells a child the addresses it asked for, from this process's directory."""
    values, gone = {}, {}
    for key in keys:
        try:
            values[key] = address.directory.lookup_key(key, 'a colocated node')
        except errors.NotRunningError as exc:
            gone[key] = str(exc)
    channel.send('addresses', values, gone)


def _answer_relocation(channel: Channel, stale: dict[str, str]) -> None:
    """Tells a child where servers it failed to reach are now (asking our launcher)."""
    values, gone = {}, {}
    for key, value in stale.items():
        try:
            values[key] = address.directory.relocate(key, value)
        except errors.NotRunningError as exc:
            gone[key] = str(exc)
    channel.send('addresses', values, gone)


def _children_grace() -> float:
    """How long children may take to stop: a second less than the launcher waits for us.

    The supervisor must end within the launcher's grace period: as a thread
    (``local_mt``) it cannot be killed, so it kills its children first.
    """
    notice = float(flags.value_or_default(flags.TERMINATION_NOTICE_SECS))
    return max(notice - 1.0, notice / 2)


def _summary(code: int, failure: tuple | None) -> str:
    return failure[0] if failure else node_process.describe_exit(code)
