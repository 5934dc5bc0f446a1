"""``local_mp`` and ``test_mp``: every node is its own process on this machine.

Each node process starts in its own session (so it has its own process
group), talks to the launcher over its control channel (a socket pair made
before the process starts, so its end is the end of the process), and is
killed with its whole group if it ignores a stop for the grace period. Crash
detection uses the control channel and the exit status, never the terminal
mode. Nothing the launcher keeps lives under ``TMPDIR`` but the log files a
terminal mode writes (see ``rundir``).
"""

from __future__ import annotations

import logging
import multiprocessing.connection as mpc
import os
import select
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import threading

from launchpad_py import errors
from launchpad_py.node_side import checkpoints, flag_transfer, node_process
from launchpad_py.courier import serialization
from launchpad_py.node_side import control_channel
from launchpad_py.supervision.launch_kit import (address_book, metrics_probe, output,
                                                 program_secret, rundir, shipping)
from launchpad_py.launchers import start_program
from launchpad_py.launchers.local import process_starter
from launchpad_py.supervision.controller import ProgramController
from launchpad_py.launchers.options import LaunchOptions
from launchpad_py.launchers.local.resources import (PythonProcess, apply_gpu_defaults,
                                                   check_open_files)
from launchpad_py.supervision.worker import (Events, FailureReport, MembersOverChannel, Worker,
                                             relay_node_messages)
from launchpad_py.program import Executable, Program

_log = logging.getLogger(__name__)
# The launcher holds a control channel and an output pipe per node, and calls it may make.
_FILES_PER_NODE = 4


class ProcessWorker(MembersOverChannel, Worker):
    """One node process, started directly or inside a tmux window."""

    can_restart = True

    def __init__(self, executable: Executable, data: bytes, setup: '_ProgramSetup',
                 resources: PythonProcess, events: Events):
        super().__init__(executable.label, executable.index, executable.description, events)
        self.worker_id = f'{self.label}/{self.index}'
        self._executable = executable
        setup.workers[self.worker_id] = self  # Its control connection (tmux) comes to us now.
        self._setup = setup
        self._resources = resources
        self._data = data
        self._sink = output.make_sink(setup.mode, self.name, setup.log_directory, setup.test)
        self._channel: control_channel.Channel | None = None
        self._channel_closed = threading.Event()
        self._probe = metrics_probe.MetricsProbe()
        self._process: subprocess.Popen | None = None
        self._pid: int | None = None
        self._pgid: int | None = None
        self._failure: FailureReport | None = None
        self._finished = False
        self._stop_pending = False
        self._kill_pending = False  # Asked of the fork server, killed before its pid came.
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        return self._pid

    def served(self) -> dict[str, str]:
        return node_process.bound_addresses(self._executable)

    def restarted(self) -> 'ProcessWorker':
        """The same node (pickle, address, resources) in a new process; its log goes on."""
        return ProcessWorker(self._executable, self._data, self._setup, self._resources,
                             self.events)

    # -- starting -------------------------------------------------------------------

    def _spec_path(self) -> str:
        setup = self._setup
        spec = {
            'program': setup.program_name, 'worker_id': self.worker_id,
            'control_address': setup.control.address if setup.control else None,
            'executable': self._data,
            'flags': setup.flags, 'args': list(self._resources.args), 'bind_host': '127.0.0.1',
            'secret': setup.secret,
            'addresses': setup.book.own(self._executable),  # A restart binds them again.
            # In tmux the parent is the window's shell, so only the channel watch applies.
            'parent_pid': os.getpid() if setup.die_with_parent and setup.mode != 'tmux_session'
            else None,
            'env': self._resources.environment() if setup.mode == 'tmux_session' else {},
        }
        path = os.path.join(setup.run_directory.path, self.name.replace('/', '_') + '.spec')
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 'wb') as spec_file:
            spec_file.write(serialization.dumps(spec))
        return path

    def _environment(self) -> dict[str, str]:
        env = node_process.child_environment(self._resources.environment())
        env['PYTHONUNBUFFERED'] = '1'
        if self._setup.control is not None:
            env[control_channel.KEY_ENV] = self._setup.control.key.hex()
        return env

    def start(self) -> None:
        spec_path = self._spec_path()
        command = [self._resources.interpreter, '-m', 'launchpad_py.node_side.local_node_main', spec_path]
        if self._setup.mode == 'tmux_session':
            self._start_in_tmux(command)
            return
        fork_server = self._setup.fork_server(self._resources)
        ours, theirs = socket.socketpair()
        try:
            with theirs:
                if fork_server is not None:  # Its pid comes later (see _wait_for_exit).
                    self._process = fork_server.ask_like_popen(
                        spec_path, self._environment(), os.getcwd(), self._sink.popen_streams(),
                        theirs.fileno())
                else:
                    self._process = subprocess.Popen(
                        command + [str(theirs.fileno())], env=self._environment(),
                        cwd=os.getcwd(), start_new_session=True, stdin=subprocess.DEVNULL,
                        pass_fds=[theirs.fileno()], **self._sink.popen_streams())
                    self._pid = self._pgid = self._process.pid
        except OSError as exc:
            ours.close()
            raise errors.LaunchError(f'cannot start node {self.name} {self._how(fork_server)}: '
                                     f'{exc}') from exc
        self._sink.attach(self._process)
        channel = control_channel.Channel(mpc.Connection(ours.detach()))
        threading.Thread(target=self._serve_channel, args=(channel,),
                         name=f'lp-channel-{self.name}', daemon=True).start()
        threading.Thread(target=self._wait_for_exit, name=f'lp-wait-{self.name}',
                         daemon=True).start()

    def _how(self, fork_server) -> str:
        return ('by the fork server' if fork_server is not None else
                f'with interpreter {self._resources.interpreter!r}')

    def _wait_until_forked(self) -> bool:
        """Takes the pid of a node asked of the fork server; False if it was not started."""
        try:
            pid = self._process.wait_started()
        except OSError as exc:
            self._sink.close()
            summary = f'cannot start node {self.name} by the fork server: {exc}'
            self.events.exited(self, None, FailureReport(summary, summary))
            return False
        with self._lock:
            if self._pgid is None:  # Else the node's hello came first.
                self._pid = self._pgid = pid
            kill_now = self._kill_pending
        if kill_now:
            self.kill()
        return True

    def _serve_channel(self, channel: control_channel.Channel) -> None:
        try:
            hello = channel.recv()
        except (EOFError, OSError):  # It ended before saying anything.
            channel.close()
            self._channel_closed.set()
            return
        self.on_connect(hello[2], hello[3], channel)

    def _start_in_tmux(self, command: list[str]) -> None:
        script = os.path.join(self._setup.run_directory.path,
                              self.name.replace('/', '_') + '.sh')
        exports = ''.join(f'export {k}={shlex.quote(v)}\n' for k, v in self._environment().items()
                          if k.isidentifier())
        with open(os.open(script, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o700), 'w') as f:
            f.write(f'{exports}cd {shlex.quote(os.getcwd())}\n'
                    f'{shlex.join(command)} 2>&1 | tee -a {shlex.quote(self._sink.log_path)}\n')
        # The window's shell leads its own process group, holding the node and its tee.
        self._pid = self._pgid = self._setup.tmux_window(self.name, script)
        threading.Thread(target=self._wait_for_exit, name=f'lp-wait-{self.name}',
                         daemon=True).start()

    # -- control channel ------------------------------------------------------------

    def on_connect(self, pid: int, pgid: int, channel: control_channel.Channel) -> None:
        with self._lock:
            self._channel, self._pid, self._pgid = channel, pid, pgid
            stop_now = self._stop_pending
            self._send_members_on_connect(channel)
        if stop_now:
            channel.send('stop')
        failure, self._finished = relay_node_messages(channel, self, self._probe,
                                                      book=self._setup.book)
        if failure is not None:
            self._failure = failure
        channel.end()  # Between two sends of other threads (members, stop).
        self._channel_closed.set()

    def _wait_for_exit(self) -> None:
        if isinstance(self._process, process_starter.ForkedProcess) and not (
                self._wait_until_forked()):
            return
        if self._process is not None:
            code = self._process.wait()
        else:  # tmux: the window's shell is not our child; wait for it to vanish.
            _wait_pid_gone(self._pgid)
            code = 0 if self._finished else 1
        # The process is gone, so its end of the channel is closed: read what it said last.
        self._channel_closed.wait(5)
        self._sink.close()
        failure = self._failure
        if failure is None and not self._finished and code != 0:
            exit_text = (node_process.describe_exit(code) if code is not None else
                         'ended without reporting why (its exit status is unknown: its fork server '
                         'had died)')
            failure = FailureReport(exit_text,
                                    f'{exit_text}\n--- output tail ---\n{self._sink.tail()}')
        self.events.exited(self, code, failure)

    # -- stopping -------------------------------------------------------------------

    def request_stop(self) -> None:
        with self._lock:
            channel = self._channel
            if channel is None:
                self._stop_pending = True
        if channel is not None:
            channel.send('stop')

    def kill(self) -> bool:
        with self._lock:
            pgid = self._pgid
            if pgid is None and self._process is not None:
                self._kill_pending = True  # Killed as soon as its pid comes.
                return True
        if pgid is None:
            return False
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return True

    def output_tail(self) -> str:
        return self._sink.tail()

    def request_metrics(self):
        return self._probe.ask(self._channel)

    def cleanup(self) -> None:
        # Anything the node left in its process group (its own subprocesses) goes too.
        self.kill()


def _wait_pid_gone(pid: int | None) -> None:
    if pid is None:
        return
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)


class _ProgramSetup(start_program.Launch):
    """What all workers of one program share: control server, directory, terminal mode."""

    def __init__(self, program: Program, mode: str, test: bool, issued: program_secret.Issued,
                 resources: dict[str, PythonProcess], servers: list[str]):
        self.program_name = program.name
        self.resources = resources
        self.servers = servers
        self.secret = issued.secret
        self.issued_secret = issued
        self.book = address_book.AddressBook(program.name, issued, servers)
        self.mode = mode
        self.test = test
        self.run_directory = rundir.LaunchDirectory()
        # Only log files live under TMPDIR, and only where the terminal mode writes them.
        self.log_directory = (tempfile.mkdtemp(prefix=f'launchpad_{program.name}_')
                              if mode in ('output_to_files', 'tmux_session') and not test
                              else self.run_directory.path)
        self.flags = flag_transfer.capture()
        self.die_with_parent = threading.current_thread() is threading.main_thread()
        self.workers: dict[str, ProcessWorker] = {}
        self.events: Events | None = None
        # tmux starts nodes itself, so they dial back to a socket instead of inheriting one.
        self.control = control_channel.ControlServer(
            os.path.join(self.run_directory.path, 'control'),
            control_channel.hand_to_workers(self.workers, 4)) if mode == 'tmux_session' else None
        self.tmux_session = f'launchpad_{program.name}_{os.getpid()}' if mode == 'tmux_session' else None
        self._fork_server: process_starter.ForkServer | None = None
        self._fork_lock = threading.Lock()

    def new_worker(self, executable: Executable, data: bytes, events: Events) -> 'ProcessWorker':
        self.book.expect([executable])
        return ProcessWorker(executable, data, self,
                             self.resources.get(executable.label, PythonProcess()), events)

    def attach(self, controller: ProgramController) -> None:
        controller.scope.servers = self.servers
        controller.scope.register_stop_handler(self.book.stop)
        self.events = controller.events

    def log_line(self, worker: 'ProcessWorker') -> str:
        return f'{worker.name}: {worker._sink.log_path}'

    def fork_server(self, resources: PythonProcess) -> process_starter.ForkServer | None:
        """The program's fork server (started on first use), or None to exec this node."""
        if not process_starter.can_fork(resources.interpreter, resources.environment()):
            return None
        with self._fork_lock:
            if self._fork_server is None:
                self._fork_server = process_starter.ForkServer.start(
                    node_process.child_environment(), self.die_with_parent, self._fork_server_died)
            return self._fork_server

    def _fork_server_died(self, reason: str) -> None:
        """Fails a launch still under way; running nodes are not affected."""
        if self.events is not None:
            self.events.process_died(reason)

    def tmux_window(self, name: str, script: str) -> int:
        """Opens a window running ``script``; returns the pid of the window's shell."""
        if not shutil.which('tmux'):
            raise errors.LaunchError("terminal='tmux_session' needs tmux; install it "
                                     "(apt-get install tmux) or use 'current_terminal'")
        window = ['-P', '-F', '#{pane_pid}', '-n', name, f'bash {shlex.quote(script)}']
        if subprocess.run(['tmux', 'has-session', '-t', self.tmux_session],
                          capture_output=True).returncode != 0:
            command = ['tmux', 'new-session', '-d', '-s', self.tmux_session]
            print(f'launchpad_py: nodes run in tmux; attach with: tmux attach -t '
                  f'{self.tmux_session}', flush=True)
        else:
            command = ['tmux', 'new-window', '-d', '-t', self.tmux_session]
        created = subprocess.run(command + window, check=True, capture_output=True, text=True)
        return int(created.stdout.strip())

    def finish(self) -> None:
        self.book.finish()
        self.issued_secret.forget()
        checkpoints.remove_private_root(self.program_name, self.secret)
        if self.control is not None:
            self.control.close()
        if self._fork_server is not None:
            self._fork_server.close()
        if self.tmux_session:
            subprocess.run(['tmux', 'kill-session', '-t', self.tmux_session], capture_output=True)
        # Sweeps too: the sockets of nodes that were killed go with the program.
        self.run_directory.close()


def _launch(program: Program, options: LaunchOptions, launch_type: str, test: bool):
    if options.serialize_py_nodes is False:
        raise errors.ProgramError(f'{launch_type} always serializes nodes to ship them to their '
                                  'processes; leave serialize_py_nodes unset')
    mode = 'current_terminal' if test and not options.terminal else output.check_mode(
        options.terminal)
    resources = dict(options.local_resources or {})
    for group, spec in resources.items():
        if not isinstance(spec, PythonProcess):
            raise errors.ResourcesError(
                f'{options.resources_keyword}[{group!r}] must be lp.PythonProcess(...) for '
                f'{launch_type} (got {spec!r})')
    prepared = shipping.prepare(program)
    check_open_files(program.name, launch_type, len(prepared), _FILES_PER_NODE)
    counts = {group: 0 for group in program.groups}
    for executable, _ in prepared:
        counts[executable.label] = counts.get(executable.label, 0) + 1
    resources, notes = apply_gpu_defaults(resources, counts, os.environ)
    for note in notes:
        _log.info('%s: %s', launch_type, note)
    servers: list[str] = []  # Filled as nodes report where they listen.
    return start_program.start(
        program, options, launch_type, prepared,
        lambda: _ProgramSetup(program, mode, test, program_secret.issue(), resources, servers),
        keep_process_alive=not test)


def launch_local(program: Program, options: LaunchOptions) -> ProgramController:
    return _launch(program, options, 'local_mp', test=False)


def launch_test(program: Program, options: LaunchOptions) -> ProgramController:
    return _launch(program, options, 'test_mp', test=True)
