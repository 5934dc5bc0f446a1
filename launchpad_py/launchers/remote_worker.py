"""The launcher's side of one node process on another host (see ``remote.py``).

A ``RemoteWorker`` starts the node with its ``Placement``'s command, writes the
bootstrap line to its stdin (kept open: its end tells the node the launcher is
gone), reads the node's control channel, and turns what it hears into the
supervisor's events.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import threading
from typing import TYPE_CHECKING

from launchpad_py import errors, node_process
from launchpad_py.courier import serialization
from launchpad_py.launchers import metrics_probe, output
from launchpad_py.launchers.worker_api import (Events, FailureReport, MembersOverChannel, Worker,
                                               relay_node_messages)
from launchpad_py.program import Executable

if TYPE_CHECKING:
    from launchpad_py.launchers.remote import RemoteSetup

HEARTBEAT_S = 1.0
#: A node ends itself after this long without a word from the launcher.
HEARTBEAT_TIMEOUT_S = 5.0


@dataclasses.dataclass
class Placement:
    """Where and how one node process starts.

    ``argv``: a local command whose stdin/stdout reach the node process (ssh,
    srun); ``host``: the name shown in statuses and messages;
    ``launcher_ip``: the launcher's address as that host reaches it;
    ``args``: extra absl flags for the node.
    """

    argv: list[str]
    host: str
    launcher_ip: str
    args: list[str] = dataclasses.field(default_factory=list)


class RemoteWorker(MembersOverChannel, Worker):
    """One node process on another host, seen from the launcher.

    ``bind``: the addresses a restarted node must serve on again (its first
    run picked them); None lets the node pick free ports.
    """

    can_restart = True

    def __init__(self, executable: Executable, placement: Placement, setup: 'RemoteSetup',
                 events: Events, bind: list[str] | None = None):
        super().__init__(executable.label, executable.index, executable.description, events)
        self.worker_id = f'{self.label}/{self.index}'
        self.executable = executable
        self.placement = placement
        self.addresses: list[str] | None = None
        self.bind = bind
        self._setup = setup
        setup.workers[self.worker_id] = self  # Its hello comes to us from now on.
        self._sink = output.make_sink(setup.mode, self.name, setup.log_dir, setup.test)
        self._process: subprocess.Popen | None = None
        self._channel: node_process.Channel | None = None
        self._pid: int | None = None
        self._failure: FailureReport | None = None
        self._finished = False
        self._stop_requested = False
        self._channel_closed = threading.Event()
        self._probe = metrics_probe.MetricsProbe()
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def host(self) -> str:
        return self.placement.host

    def start(self) -> None:
        setup = self._setup
        boot = {'control': list(setup.control_for(self.placement.launcher_ip).address),
                'key': setup.control_for(self.placement.launcher_ip).key.hex(),
                'secret': setup.secret.hex(), 'worker_id': self.worker_id,
                'addresses': len(self.executable.addresses), 'bind': self.bind,
                'heartbeat_timeout': HEARTBEAT_TIMEOUT_S}
        try:
            # A session of its own: Ctrl-C in the terminal goes to the launcher, which
            # stops the nodes gracefully, instead of cutting their connections.
            self._process = subprocess.Popen(
                self.placement.argv, stdin=subprocess.PIPE, start_new_session=True,
                **self._sink.popen_streams())
        except OSError as exc:
            raise errors.LaunchError(f'cannot start node {self.name} on {self.host}: {exc}') from exc
        self._sink.attach(self._process)
        try:  # stdin stays open: its end tells the node its launcher is gone.
            self._process.stdin.write(json.dumps(boot).encode() + b'\n')
            self._process.stdin.flush()
        except OSError:
            pass  # The starter died at once; _wait_for_exit reports it with its output.
        threading.Thread(target=self._wait_for_exit, name=f'lp-wait-{self.name}',
                         daemon=True).start()

    def on_connect(self, pid: int, pgid: int, addresses: list[str],
                   channel: node_process.Channel) -> None:
        del pgid  # The starter (ssh, srun) ends the node's group; the node ends it itself too.
        with self._lock:
            self._channel, self._pid, self.addresses = channel, pid, addresses
            stop_now = self._stop_requested
            self._send_members_on_connect(channel)
        if stop_now:  # Stopped while it was starting: it ends without running.
            channel.send('stop')
        else:
            self._setup.bound(self)
        failure, self._finished = relay_node_messages(channel, self, self._probe,
                                                      f' (on host {self.host})')
        if failure is not None:
            self._failure = failure
        self._channel_closed.set()

    def restarted(self) -> 'RemoteWorker':
        """The same node on the same host, serving on the addresses it had."""
        return RemoteWorker(self.executable, self.placement, self._setup, self.events,
                            bind=self.addresses or self.bind)

    def send(self, *message) -> None:
        channel = self._channel
        if channel is not None:
            channel.send(*message)

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
        code = self._process.wait()
        # The starter is gone, so the channel is closed or about to be: read the last words.
        self._channel_closed.wait(5 if self._channel is not None else 0)
        self._sink.close()
        failure = self._failure
        if failure is None and not self._finished:
            if self._channel is None:
                text = (f'the node process on {self.host} ended before it reached the launcher '
                        f'({node_process.describe_exit(code)}); is {self.placement.launcher_ip} '
                        f'reachable from {self.host}?')
            else:
                text = f'the connection to {self.host} ended ({node_process.describe_exit(code)})'
            failure = FailureReport(text, f'{text}\n--- output tail ---\n{self._sink.tail()}')
        self.events.exited(self, code, failure)

    def request_stop(self) -> None:
        with self._lock:
            self._stop_requested = True
            channel = self._channel
        if channel is not None:  # Before 'run' too: the node then ends without running.
            channel.send('stop')

    def kill(self) -> bool:
        """Cuts the node's connections; it then kills its own process group."""
        channel = self._channel
        if channel is not None:
            channel.close()
        process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
        return process is not None

    def output_tail(self) -> str:
        return self._sink.tail()

    def request_metrics(self):
        return self._probe.ask(self._channel)

    def cleanup(self) -> None:
        self.kill()
        process = self._process
        if process is not None:
            try:
                process.stdin.close()
            except OSError:
                pass
