"""The launcher's side of one node process on another host (see ``launch.py``).

A ``RemoteWorker`` starts the node with its ``Placement``'s ``Starter`` (by
default a local command such as ssh, which gets the bootstrap line on its
stdin, kept open: its end tells the node the launcher is gone), reads the
node's control channel, and turns what it hears into the supervisor's events.
"""

from __future__ import annotations

import abc
import dataclasses
import json
import subprocess
import threading

from launchpad_py import errors
from launchpad_py.node_side import node_process
from launchpad_py.courier import serialization
from launchpad_py.supervision.launch_kit import metrics_probe, output
from launchpad_py.supervision.worker import (Events, FailureReport, MembersOverChannel, Worker,
                                             relay_node_messages)
from launchpad_py.launchers.remote.setup import (HEARTBEAT_TIMEOUT_S, SILENCE_TIMEOUT_S,
                                                RemoteSetup)
from launchpad_py.program import Executable

#: How long a run whose starter ended (its process or pod gone) may still take to close its
#: channel, saying its last words (a failure's traceback) before it goes.
LAST_WORDS_S = 5.0
_PING = node_process.frame('ping')  # Encoded once: a heartbeat round is one send per node.
_STOP = node_process.frame('stop')  # Likewise for the stop, asked of every node in a row.


class Starter(abc.ABC):
    """How one node process gets started somewhere, and how the launcher learns that it ended.

    ``CommandStarter`` runs a local command whose stdin and stdout reach the
    node (ssh, srun); a launcher with no such command (Kubernetes: a pod)
    brings its own.
    """

    @abc.abstractmethod
    def start(self, boot: dict, sink: output.Sink) -> None:
        """Starts the node with its bootstrap ``boot``; its output goes to ``sink``."""

    @abc.abstractmethod
    def wait(self) -> int | None:
        """Blocks until the node's process has ended; its exit code (None: unknown)."""

    @abc.abstractmethod
    def terminate(self) -> bool:
        """Ends the node's process from outside; False when nothing was started."""

    def close(self) -> None:
        """Releases what the starter holds once the program is over."""

    def release(self) -> None:
        """The node's run ended for good while the program goes on (replaced by a restart,
        or removed from its elastic group): gives back what the scheduler still holds."""

    def describe_exit(self, code: int | None) -> str:
        """How the node's process ended, for failure messages (``'exited with code 3'``)."""
        return node_process.describe_exit(code)

    def taken_away(self) -> str | None:
        """Why the scheduler ended the node though the launcher did not ask (a pod deleted,
        evicted, preempted, a Slurm job cancelled or out of time), which fails it even if it
        then ended cleanly, and is why the program ended even when the node's stop request
        (SIGTERM) reached the launcher first; None if it did not."""
        return None

    def lost_by(self) -> str | None:
        """Why the platform lost the node through no fault of its own, as a short reason
        (``'host_lost'``: the connection to its host dropped; ``'node_failure'``: the
        scheduler reports its machine failed; ``'evicted'``, ``'deleted'``, ``'preempted'``,
        ``'node_lost'``: the cluster ended its pod, which a new pod replaces), which restarts
        it without counting against ``max_restarts``; None if it did not or the launcher
        cannot tell."""
        return None

    def ran_on(self, host: str) -> None:
        """The node reported the host it runs on (where the scheduler chose it)."""

    def stop_requested(self) -> None:
        """The program's stop (or the node's removal) has been sent to the node: however its
        run ends from now on is part of that stop, not the scheduler taking it away."""

    def host_gone(self) -> bool:
        """Whether the node's run ended with its host (a Ray node lost), so a restart serves
        elsewhere though the starter keeps addresses where it can."""
        return False

    #: Whether the node needs the launcher's heartbeat to notice a frozen launcher or a lost
    #: network; False where the starter watches for that itself (a host agent, per host).
    needs_heartbeat = True

    #: The name statuses show for this run where the starter makes one (a pod's name);
    #: None: the placement's host.
    shown_as: str | None = None

    #: Whether a restart serves at the same addresses; False where it comes back elsewhere
    #: (a new pod): its clients then find it through the launch's address book.
    keeps_addresses = True

    def again(self, host: str | None) -> 'Starter | None':
        """A fresh starter for a restart of the same node on the same host (``host``: the one
        it reported, None if it never did), or None where the launcher cannot put it there."""
        return None


class CommandStarter(Starter):
    """A local command (ssh, srun) whose stdin carries the bootstrap and whose stdout the output.

    stdin stays open after the bootstrap line: its end tells the node its launcher is gone.
    """

    def __init__(self, argv: list[str]):
        self.argv = argv
        self._process: subprocess.Popen | None = None

    def start(self, boot: dict, sink: output.Sink) -> None:
        # A session of its own: Ctrl-C in the terminal goes to the launcher, which
        # stops the nodes gracefully, instead of cutting their connections.
        self._process = subprocess.Popen(self.argv, stdin=subprocess.PIPE, start_new_session=True,
                                         **sink.popen_streams())
        sink.attach(self._process)
        try:
            self._process.stdin.write(json.dumps(boot).encode() + b'\n')
            self._process.stdin.flush()
        except OSError:
            pass  # The starter died at once; the worker reports it with its output.

    def again(self, host: str | None) -> 'CommandStarter':
        return CommandStarter(self.argv)  # The command names the host (ssh) or none (tests).

    def wait(self) -> int | None:
        return self._process.wait()

    def terminate(self) -> bool:
        process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
        return process is not None

    def close(self) -> None:
        if self._process is not None:
            try:
                self._process.stdin.close()
            except OSError:
                pass


@dataclasses.dataclass
class Placement:
    """Where and how one node process starts.

    ``argv``: a local command whose stdin/stdout reach the node process (ssh,
    srun); ``host``: the name shown in statuses and messages;
    ``launcher_ip``: the launcher's address as that host reaches it;
    ``args``: extra absl flags for the node; ``starter``: how to start it
    where no local command reaches it (then ``argv`` is unused).

    Where a scheduler picks the host, the launcher cannot name it in advance:
    ``host_env`` names the node's environment variable that holds its host's
    name (Slurm's ``SLURMD_NODENAME``), which the node reports when it dials
    back; until then ``host`` is shown.
    """

    argv: list[str]
    host: str
    launcher_ip: str
    args: list[str] = dataclasses.field(default_factory=list)
    starter: Starter | None = None
    host_env: str | None = None


def run_id(label: str, index: int, run: int) -> str:
    """The id a node's run ``run`` says hello with: ``'label/index'``, then ``'label/index#1'``...

    A process of an earlier run may still dial in (its pod deleted before it
    reached us, its container not stopped yet): under the node's plain name it
    passed for the new run, reported its address and served beside it, and its
    end then marked the new run's address gone. Under its own id its hello names
    no worker any more: its channel is closed and it ends itself.
    """
    return f'{label}/{index}' if run == 0 else f'{label}/{index}#{run}'


class RemoteWorker(MembersOverChannel, Worker):
    """One node process on another host, seen from the launcher.

    ``bind``: the addresses a restarted node must serve on again (its first
    run picked them); None lets the node pick free ports. ``incarnation``: 0, one
    more per restart; each run has an id of its own (see ``run_id``).
    """

    def __init__(self, executable: Executable, placement: Placement, setup: RemoteSetup,
                 events: Events, bind: list[str] | None = None, incarnation: int = 0):
        super().__init__(executable.label, executable.index, executable.description, events)
        self.incarnation = incarnation
        self.worker_id = run_id(self.label, self.index, incarnation)
        self.executable = executable
        self.placement = placement
        self.addresses: list[str] | None = None
        self.bind = bind
        self._reported_host: str | None = None
        self._setup = setup
        self._sink = output.make_sink(setup.mode, self.name, setup.log_dir, setup.test,
                                      keep_log=setup.keep_logs)
        self._starter = placement.starter or CommandStarter(placement.argv)
        self._channel: node_process.Channel | None = None
        self._pid: int | None = None
        self._failure: FailureReport | None = None
        self._finished = False
        self._stop_requested = False
        self._channel_closed = threading.Event()
        self._run_over = False  # Its starter ended: no connection is taken any more.
        self._probe = metrics_probe.MetricsProbe()
        self._lock = threading.Lock()
        # Registered last: the heartbeat thread pings every registered worker at any moment,
        # and one half built (a restart's, no starter yet) ended the heartbeat for good.
        if incarnation:  # The run before hears nothing more from us: no ping, no hello taken.
            setup.workers.pop(run_id(self.label, self.index, incarnation - 1), None)
        setup.workers[self.worker_id] = self  # Its hello comes to us from now on.

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def host(self) -> str:
        return self._reported_host or self.placement.host

    def _bootstrap(self) -> dict:
        """What the node needs to dial back: control address and key, program secret, its id."""
        control = self._setup.control_for(self.placement.launcher_ip)
        return {'control': list(control.address), 'key': control.key.hex(),
                'secret': self._setup.secret.hex(), 'worker_id': self.worker_id,
                'addresses': len(self.executable.addresses), 'bind': self.bind,
                'heartbeat_timeout': SILENCE_TIMEOUT_S if self.needs_heartbeat else None,
                'host_timeout': HEARTBEAT_TIMEOUT_S if self.needs_heartbeat else None,
                'host_env': self.placement.host_env}

    @property
    def keeps_addresses(self) -> bool:
        """Whether a restart of the node serves where it did (see ``Starter``)."""
        return self._starter.keeps_addresses

    @property
    def needs_heartbeat(self) -> bool:
        return self._starter.needs_heartbeat

    def start(self) -> None:
        try:
            self._starter.start(self._bootstrap(), self._sink)
        except OSError as exc:
            raise errors.LaunchError(f'cannot start node {self.name} on {self.host}: {exc}') from exc
        threading.Thread(target=self._wait_for_exit, name=f'lp-wait-{self.name}',
                         daemon=True).start()

    def on_connect(self, pid: int, pgid: int, addresses: list[str], host: str | None,
                   channel: node_process.Channel) -> None:
        del pgid  # The starter (ssh, srun) ends the node's group; the node ends it itself too.
        with self._lock:
            if self._run_over:  # Dialed back after its starter ended (a pod deleted first):
                channel.close()  # a restart takes its place; refused, it ends itself.
                return
            self._channel, self._pid, self.addresses = channel, pid, addresses
            if self.placement.host_env and host:
                self._reported_host = host
                self._starter.ran_on(host)
            stop_now = self._stop_requested
            self._send_members_on_connect(channel)
        if stop_now:  # Stopped while it was starting: it ends without running.
            channel.send('stop')
        else:
            self._setup.bound(self)
        failure, self._finished = relay_node_messages(channel, self, self._probe,
                                                      f' (on host {self.host})', self._setup.book)
        channel.end()  # By its reader, which is done with it (see ``kill``).
        if failure is not None:
            self._failure = failure
        if not self._starter.keeps_addresses and addresses:
            # A new run (a new pod) serves elsewhere, even after a clean end (a pod deleted
            # asks its node to stop): clients wait for its report and leave the old address.
            self._leave_addresses(addresses)
        self._channel_closed.set()

    def _leave_addresses(self, addresses: list[str] | None) -> None:
        """The addresses one run reported are gone with it (only that run's: a restart may
        have reported new ones meanwhile): relocations wait for the next report, and calls
        waiting there fail at once instead of waiting at an address that may never answer."""
        if addresses:
            self._setup.book.withdraw(dict(zip((a.key for a in self.executable.addresses),
                                               addresses)))
            self._setup.moved(list(addresses))

    @property
    def can_restart(self) -> bool:
        """Whether its starter can start the node again (ssh and srun on the same host, at
        its addresses; Kubernetes as a new pod, at new ones)."""
        return self._starter.again(None) is not None

    def restarted(self) -> 'RemoteWorker':
        """The same node on the same host, serving on the addresses it had (or, where its
        starter cannot keep them, on new ones its clients then look up)."""
        starter = self._starter.again(self._reported_host)
        placement = dataclasses.replace(self.placement, starter=starter,
                                        host=starter.shown_as or self.placement.host)
        bind = self.addresses or self.bind if self._starter.keeps_addresses else None
        return RemoteWorker(self.executable, placement, self._setup, self.events, bind=bind,
                            incarnation=self.incarnation + 1)

    def served(self) -> dict[str, str]:
        return node_process.bound_addresses(self.executable)

    def send(self, *message) -> None:
        channel = self._channel
        if channel is not None:
            channel.send(*message)

    def ping(self) -> None:
        """The heartbeat: never waits on this node (see ``Channel.nudge``)."""
        channel = self._channel
        if channel is not None:
            channel.nudge(_PING)

    def run(self, program_name: str, flags) -> None:
        """Ships the executable, now that every address of the program is known."""
        with self._lock:
            if not self._stop_requested:
                data = serialization.dumps(self.executable)
                self.send('run', program_name, data, flags, list(self.placement.args))

    def fail_before_run(self, summary: str) -> None:
        """Ends a node that cannot run (e.g. unreachable address), with ``summary`` as its failure."""
        self._failure = FailureReport(summary, summary)
        self.kill()

    def _wait_for_exit(self) -> None:
        code = self._starter.wait()
        with self._lock:
            self._run_over = True
            channel = self._channel
        # The starter is gone, so the channel is closed or about to be: read the last words,
        # unless the scheduler took the node (a pod deleted: its container may stop seconds
        # later, and nothing the node says changes the verdict; a deleted coordinator's
        # program stopped 7.3 s after, 5 of them waiting here).
        last_words_s = 0 if self._starter.taken_away() is not None else LAST_WORDS_S
        if channel is not None and not self._channel_closed.wait(last_words_s):
            # Still connected though its starter ended (a pod deleted, its container not
            # stopped yet): cut, it ends itself, rather than serve beside its restart.
            channel.cut()
        self._sink.close()
        failure = self._failure
        taken = self._starter.taken_away() if failure is None or failure.follows_from_a_peer else None
        if taken is not None:  # The scheduler's doing is why, even if the node ended cleanly.
            failure = FailureReport(taken, f'{taken}\n--- output tail ---\n{self._sink.tail()}',
                                    by_scheduler=True, lost_by=self._starter.lost_by())
        if failure is None and not self._finished:
            how = self._starter.describe_exit(code)
            if self._channel is None:
                text = (f'the node process on {self.host} ended before it reached the launcher '
                        f'({how}); is {self.placement.launcher_ip} reachable from {self.host}?')
            else:
                text = f'the connection to {self.host} ended ({how})'
            failure = FailureReport(text, f'{text}\n--- output tail ---\n{self._sink.tail()}',
                                    lost_by=self._starter.lost_by())
        if self._starter.keeps_addresses and self._starter.host_gone():
            self._leave_addresses(self.addresses)  # Its restart comes back on another host.
        if self.removing:  # Left its elastic group: what held it goes now.
            self._starter.release()
        self.events.exited(self, code, failure)

    def request_stop(self) -> None:
        with self._lock:
            self._stop_requested = True
            channel = self._channel
        self._starter.stop_requested()
        if channel is not None:  # Before 'run' too: the node then ends without running.
            channel.post(_STOP)  # Never waits: the stop asks every node from one thread.

    def kill(self) -> bool:
        """Ends the node from outside, then cuts its connections (it then kills its own
        process group). In that order: the cut ends the node at once, and a starter that
        heard of that end first took the kill for the node ending itself (a pod then not
        deleted with the others killed, but one by one after the program by its root's
        cascade: seen 1 in 8 stops under load)."""
        started = self._starter.terminate()
        channel = self._channel
        if channel is not None:
            # (close alone: the node heard nothing while we waited in recv.) Not closed
            # here: the channel thread ends it once the cut ends its read; closed under
            # it, that thread read descriptor None (a TypeError) or, reused, another file.
            channel.cut()
        return started

    def output_tail(self) -> str:
        return self._sink.tail()

    def request_metrics(self):
        return self._probe.ask(self._channel)

    def cleanup(self) -> None:
        self.kill()
        self._starter.close()
        if self.retired:  # Its restart took its place.
            self._starter.release()
