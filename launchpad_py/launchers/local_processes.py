"""``local_mp`` and ``test_mp``: every node is its own process on this machine.

Each node process starts in its own session (so it has its own process
group), connects back over the control channel, and is killed with its whole
group if it ignores a stop for the grace period. Crash detection uses the
control channel and the exit status, never the terminal mode.
"""

from __future__ import annotations

import os
import select
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading

from launchpad_py import errors, node_process
from launchpad_py.courier import serialization
from launchpad_py.launchers import (control, flag_transfer, metrics_probe, output,
                                    process_starter, program_secret, shipping)
from launchpad_py.launchers.controller import ProgramController
from launchpad_py.launchers.options import LaunchOptions
from launchpad_py.launchers.resources import PythonProcess, hide_gpus_from_other_groups
from launchpad_py.launchers.worker_api import Events, FailureReport, Worker
from launchpad_py.program import Executable, Program


class ProcessWorker(Worker):
    """One node process, started directly or inside a tmux window."""

    def __init__(self, executable: Executable, data: bytes, setup: '_ProgramSetup',
                 resources: PythonProcess, events: Events):
        super().__init__(executable.label, executable.index, executable.description, events)
        self.worker_id = f'{self.label}/{self.index}'
        self._setup = setup
        self._resources = resources
        self._data = data
        self._sink = output.make_sink(setup.mode, self.name, setup.directory, setup.test)
        self._channel: control.Channel | None = None
        self._connected = threading.Event()
        self._channel_closed = threading.Event()
        self._probe = metrics_probe.MetricsProbe()
        self._process: subprocess.Popen | None = None
        self._pid: int | None = None
        self._pgid: int | None = None
        self._failure: FailureReport | None = None
        self._finished = False
        self._stop_pending = False
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        return self._pid

    # -- starting -------------------------------------------------------------------

    def _spec_path(self) -> str:
        setup = self._setup
        spec = {
            'program': setup.program_name, 'worker_id': self.worker_id,
            'control_address': setup.control.address, 'executable': self._data,
            'flags': setup.flags, 'args': list(self._resources.args), 'bind_host': '127.0.0.1',
            'secret': setup.secret,
            # In tmux the parent is the window's shell, so only the channel watch applies.
            'parent_pid': os.getpid() if setup.die_with_parent and setup.mode != 'tmux_session'
            else None,
            'env': self._resources.environment() if setup.mode == 'tmux_session' else {},
        }
        path = os.path.join(setup.directory, self.name.replace('/', '_') + '.spec')
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 'wb') as spec_file:
            spec_file.write(serialization.dumps(spec))
        return path

    def _environment(self) -> dict[str, str]:
        env = node_process.child_environment(self._resources.environment())
        env['PYTHONUNBUFFERED'] = '1'
        env[control.KEY_ENV] = self._setup.control.key.hex()
        return env

    def start(self) -> None:
        spec_path = self._spec_path()
        command = [self._resources.interpreter, '-m', 'launchpad_py.launchers.worker', spec_path]
        if self._setup.mode == 'tmux_session':
            self._start_in_tmux(command)
            return
        fork_server = self._setup.fork_server(self._resources)
        try:
            if fork_server is not None:
                self._process = fork_server.spawn_like_popen(
                    spec_path, self._environment(), os.getcwd(), self._sink.popen_streams())
            else:
                self._process = subprocess.Popen(
                    command, env=self._environment(), cwd=os.getcwd(), start_new_session=True,
                    stdin=subprocess.DEVNULL, **self._sink.popen_streams())
        except OSError as exc:
            raise errors.LaunchError(
                f'cannot start node {self.name} with interpreter '
                f'{self._resources.interpreter!r}: {exc}') from exc
        self._pid = self._pgid = self._process.pid
        self._sink.attach(self._process)
        threading.Thread(target=self._wait_for_exit, name=f'lp-wait-{self.name}',
                         daemon=True).start()

    def _start_in_tmux(self, command: list[str]) -> None:
        script = os.path.join(self._setup.directory, self.name.replace('/', '_') + '.sh')
        exports = ''.join(f'export {k}={shlex.quote(v)}\n' for k, v in self._environment().items()
                          if k.isidentifier())
        with open(os.open(script, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o700), 'w') as f:
            f.write(f'{exports}cd {shlex.quote(os.getcwd())}\n'
                    f'{shlex.join(command)} 2>&1 | tee {shlex.quote(self._sink.log_path)}\n')
        # The window's shell leads its own process group, holding the node and its tee.
        self._pid = self._pgid = self._setup.tmux_window(self.name, script)
        threading.Thread(target=self._wait_for_exit, name=f'lp-wait-{self.name}',
                         daemon=True).start()

    # -- control channel ------------------------------------------------------------

    def on_connect(self, pid: int, pgid: int, channel: control.Channel) -> None:
        with self._lock:
            self._channel, self._pid, self._pgid = channel, pid, pgid
            stop_now = self._stop_pending
        self._connected.set()
        if stop_now:
            channel.send('stop')
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
                self._failure = FailureReport(summary, text, exception)
            elif kind == 'finished':
                self._finished = True
            elif kind == 'metrics':
                self._probe.answer(message)
        self._probe.close()
        self._channel_closed.set()

    def _wait_for_exit(self) -> None:
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
            exit_text = node_process.describe_exit(code)
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
        pgid = self._pgid
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


class _ProgramSetup:
    """What all workers of one program share: control server, directory, terminal mode."""

    def __init__(self, program: Program, mode: str, test: bool, secret: bytes,
                 forget_secret):
        self.program_name = program.name
        self.secret = secret
        self._forget_secret = forget_secret
        self.mode = mode
        self.test = test
        self.directory = tempfile.mkdtemp(prefix=f'launchpad_{program.name}_')
        self.flags = flag_transfer.capture()
        self.die_with_parent = threading.current_thread() is threading.main_thread()
        self.workers: dict[str, ProcessWorker] = {}
        self.control = control.ControlServer(os.path.join(self.directory, 'control'),
                                             self._on_connect)
        self.tmux_session = f'launchpad_{program.name}_{os.getpid()}' if mode == 'tmux_session' else None
        self._fork_server: process_starter.ForkServer | None = None
        self._fork_lock = threading.Lock()

    def fork_server(self, resources: PythonProcess) -> process_starter.ForkServer | None:
        """The program's fork server (started on first use), or None to exec this node."""
        if not process_starter.can_fork(resources.interpreter, resources.environment()):
            return None
        with self._fork_lock:
            if self._fork_server is None:
                self._fork_server = process_starter.ForkServer.start(
                    node_process.child_environment(), self.die_with_parent)
            return self._fork_server

    def _on_connect(self, hello, channel: control.Channel) -> None:
        if not (isinstance(hello, tuple) and len(hello) == 4 and hello[0] == 'hello'
                and hello[1] in self.workers):
            channel.close()
            return
        worker = self.workers[hello[1]]
        threading.Thread(target=worker.on_connect, args=(hello[2], hello[3], channel),
                         name=f'lp-channel-{worker.name}', daemon=True).start()

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
        self._forget_secret()
        self.control.close()
        if self._fork_server is not None:
            self._fork_server.close()
        if self.tmux_session:
            subprocess.run(['tmux', 'kill-session', '-t', self.tmux_session], capture_output=True)
        if self.mode == 'output_to_files' or self.mode == 'tmux_session':
            for name in os.listdir(self.directory):  # Keep the logs, drop the rest.
                if not name.endswith('.log'):
                    _remove(os.path.join(self.directory, name))
        else:
            shutil.rmtree(self.directory, ignore_errors=True)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


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
                f'local_resources[{group!r}] must be lp.PythonProcess(...) for {launch_type} '
                f'(got {spec!r})')
    resources = hide_gpus_from_other_groups(resources, list(program.groups))
    prepared = shipping.prepare(program)
    secret, forget_secret = program_secret.issue(e for e, _ in prepared)
    setup = _ProgramSetup(program, mode, test, secret, forget_secret)
    controller = ProgramController(program.name, launch_type, options.grace,
                                   keep_process_alive=not test, on_finish=setup.finish)
    workers = []
    for executable, data in prepared:
        worker = ProcessWorker(executable, data, setup,
                               resources.get(executable.label, PythonProcess()), controller.events)
        setup.workers[worker.worker_id] = worker
        workers.append(worker)
    if mode == 'output_to_files':
        print(f'launchpad_py: node logs of {program.name!r}:', flush=True)
        for worker in workers:
            print(f'  {worker.name}: {worker._sink.log_path}', flush=True)
    return controller.start(workers, options.ready_timeout)


def launch_local(program: Program, options: LaunchOptions) -> ProgramController:
    return _launch(program, options, 'local_mp', test=False)


def launch_test(program: Program, options: LaunchOptions) -> ProgramController:
    return _launch(program, options, 'test_mp', test=True)
