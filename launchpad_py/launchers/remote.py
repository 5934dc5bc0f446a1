"""Supervising node processes on other hosts, however they were started.

SSH, Slurm and Kubernetes differ only in how a process gets started on some
host. A launcher module describes that with a ``Placement`` per node (the
local command that starts it, e.g. ``ssh h1 python -m ...``) and calls
``launch``; everything after the start lives here:

1. Each node process (``remote_node.py``) reads its bootstrap from its stdin,
   dials back to the launcher over an authenticated TCP control channel and
   reports the ``host:port`` it will serve on (its interface that reaches the
   launcher, and free ports there).
2. Once every node has reported, the launcher fills the address table
   (late binding: nobody knows a node's address before it is placed),
   ships each node its executable, and the nodes build, serve and report ready.
3. Logs come back through the starter's stdout. The launcher sends a
   heartbeat every second; a node whose channel, heartbeat or stdin ends
   kills its own process group.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import secrets
import shutil
import subprocess
import tempfile
import threading

from launchpad_py import courier, errors, node_process
from launchpad_py.courier import serialization
from launchpad_py.launchers import control, flag_transfer, output, shipping
from launchpad_py.launchers.controller import ProgramController
from launchpad_py.launchers.options import LaunchOptions
from launchpad_py.launchers.worker_api import Events, FailureReport, Worker
from launchpad_py.program import AbstractAddressBuilder, Executable, Program

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


class _Unbound(AbstractAddressBuilder):
    """A placeholder so executables can be built and checked before anyone binds."""

    def build(self) -> str:
        return 'unbound.invalid:0'


class RemoteWorker(Worker):
    """One node process on another host, seen from the launcher."""

    def __init__(self, executable: Executable, placement: Placement, setup: '_RemoteSetup',
                 events: Events):
        super().__init__(executable.label, executable.index, executable.description, events)
        self.worker_id = f'{self.label}/{self.index}'
        self.executable = executable
        self.placement = placement
        self.addresses: list[str] | None = None
        self._setup = setup
        self._sink = output.make_sink(setup.mode, self.name, setup.log_dir, setup.test)
        self._process: subprocess.Popen | None = None
        self._channel: node_process.Channel | None = None
        self._pid: int | None = None
        self._failure: FailureReport | None = None
        self._finished = False
        self._stop_requested = False
        self._channel_closed = threading.Event()
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
                'addresses': len(self.executable.addresses),
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

    def on_connect(self, pid: int, addresses: list[str], channel: node_process.Channel) -> None:
        with self._lock:
            self._channel, self._pid, self.addresses = channel, pid, addresses
            stop_now = self._stop_requested
        if stop_now:  # Stopped while it was starting: it ends without running.
            channel.send('stop')
        else:
            self._setup.bound(self)
        while True:
            try:
                message = channel.recv()
            except (EOFError, OSError):
                break
            kind = message[0]
            if kind == 'ready':
                self.events.ready(self)
            elif kind == 'stop_program':
                self.events.stop_requested()
            elif kind == 'failed':
                _, summary, text, exception_bytes = message
                exception = node_process.rebuild_exception(exception_bytes)
                self._failure = FailureReport(f'{summary} (on host {self.host})', text, exception)
            elif kind == 'finished':
                self._finished = True
        self._channel_closed.set()

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

    def cleanup(self) -> None:
        self.kill()
        process = self._process
        if process is not None:
            try:
                process.stdin.close()
            except OSError:
                pass


class _RemoteSetup:
    """What the workers of one program share: control listeners, the secret, the address table."""

    def __init__(self, program: Program, mode: str, test: bool, log_dir: str):
        self.program_name = program.name
        self.mode, self.test, self.log_dir = mode, test, log_dir
        self.secret = secrets.token_bytes(32)
        self.flags = flag_transfer.capture()
        self.workers: dict[str, RemoteWorker] = {}
        self._controls: dict[str, control.ControlServer] = {}
        self._registered: list[str] = []
        self._distributed = False
        self._lock = threading.Lock()
        self._closed = threading.Event()

    def control_for(self, ip: str) -> control.ControlServer:
        """The control listener on our interface ``ip`` (one per interface the hosts reach)."""
        with self._lock:
            if ip not in self._controls:
                self._controls[ip] = control.ControlServer((ip, 0), self._on_connect,
                                                           family='AF_INET')
            return self._controls[ip]

    def _on_connect(self, hello, channel: node_process.Channel) -> None:
        if not (isinstance(hello, tuple) and len(hello) == 5 and hello[0] == 'hello'
                and hello[1] in self.workers):
            channel.close()
            return
        worker = self.workers[hello[1]]
        threading.Thread(target=worker.on_connect, args=(hello[2], hello[4], channel),
                         name=f'lp-channel-{worker.name}', daemon=True).start()

    def bound(self, worker: RemoteWorker) -> None:
        """Called as each node reports its addresses; the last one completes the table."""
        with self._lock:
            if self._distributed or any(w.addresses is None for w in self.workers.values()):
                return
            self._distributed = True
        workers = list(self.workers.values())
        for each in workers:
            for address, value in zip(each.executable.addresses, each.addresses):
                address.assign(value)
        unreachable = _loopback_in_multi_host(workers)
        if unreachable:
            for each in workers:
                each.fail_before_run(unreachable)
            return
        for each in workers:
            for value in each.addresses:
                courier.register_secret(value, self.secret)
                self._registered.append(value)
        for each in workers:
            try:
                each.run(self.program_name, self.flags)
            except Exception as exc:  # Checked before the start, so only a surprise lands here.
                each.fail_before_run(f'cannot ship node {each.name}: {type(exc).__name__}: {exc}')

    def heartbeat(self) -> None:
        while not self._closed.wait(HEARTBEAT_S):
            for worker in list(self.workers.values()):
                worker.send('ping')

    def finish(self) -> None:
        self._closed.set()
        for value in self._registered:
            courier.forget_secret(value)
        for server in self._controls.values():
            server.close()


def _loopback_in_multi_host(workers: list[RemoteWorker]) -> str | None:
    """A message when some node can only be reached on its own host, yet others run elsewhere."""
    hosts = {w.placement.host for w in workers}
    if len(hosts) < 2:
        return None
    for worker in workers:
        if worker.addresses and ipaddress.ip_address(
                worker.addresses[0].rpartition(':')[0]).is_loopback:
            others = sorted(hosts - {worker.host})
            return (f'node {worker.name} on host {worker.host!r} would listen on '
                    f'{worker.addresses[0]}, a loopback address that nodes on {others} cannot '
                    f'reach: {worker.host!r} reaches the launcher through loopback. Name the host '
                    'by an address the other hosts can reach too.')
    return None


def launch(program: Program, options: LaunchOptions, launch_type: str,
           placements: dict[tuple[str, int], Placement]) -> ProgramController:
    """Starts every executable where ``placements[(label, index)]`` says; returns when all serve."""
    mode = output.check_mode(options.terminal)
    if mode == 'tmux_session':
        raise errors.ProgramError(f"{launch_type} streams node output back; terminal='tmux_session' "
                                  "is for local_mp (use 'current_terminal' or 'output_to_files')")
    for node in program.get_all_nodes():
        for address in node.addresses:
            address.unbind()
    shipping.assign_addresses(program, _Unbound())
    prepared = shipping.prepare(program)  # Checks that every node can be shipped, up front.
    log_dir = tempfile.mkdtemp(prefix=f'launchpad_{program.name}_')
    setup = _RemoteSetup(program, mode, False, log_dir)

    def finish() -> None:
        setup.finish()
        if mode != 'output_to_files':
            shutil.rmtree(log_dir, ignore_errors=True)

    controller = ProgramController(program.name, launch_type, options.grace,
                                   keep_process_alive=True, on_finish=finish)
    workers = []
    for executable, _ in prepared:
        worker = RemoteWorker(executable, placements[executable.label, executable.index], setup,
                              controller.events)
        setup.workers[worker.worker_id] = worker
        workers.append(worker)
    if mode == 'output_to_files':
        print(f'launchpad_py: node logs of {program.name!r}:', flush=True)
        for worker in workers:
            print(f'  {worker.name} ({worker.host}): {worker._sink.log_path}', flush=True)
    threading.Thread(target=setup.heartbeat, name=f'lp-heartbeat-{program.name}',
                     daemon=True).start()
    return controller.start(workers, options.ready_timeout)
