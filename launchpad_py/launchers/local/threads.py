"""``local_mt`` and ``test_mt``: every node is a thread of the launching process.

Node threads share one ``ProgramScope``, so a stop reaches all of them at
once and each stop handler runs once. Threads cannot be killed: when a node
ignores the stop for the grace period, ``local_mt`` ends the launching
process with the stuck nodes' stacks and ``test_mt`` raises (see ``stuck_threads``).
A node that raised can be restarted (a new thread runs a fresh copy of it);
one cannot be stopped alone, so groups here are not elastic.
"""

from __future__ import annotations

import concurrent.futures
import threading

from launchpad_py.node_side import checkpoints, runtime
from launchpad_py.node_side.reporting import labelled_output, node_logging, node_metrics
from launchpad_py.courier import serialization
from launchpad_py.supervision import (address_book, program_secret, rundir, shipping,
                                      stuck_threads)
from launchpad_py.supervision.controller import ProgramController
from launchpad_py.launchers import start_program
from launchpad_py.launchers.local.resources import check_open_files
from launchpad_py.launchers.options import LaunchOptions
from launchpad_py.supervision.worker import Events, FailureReport, Worker
from launchpad_py.program import ExecutionContext, Executable, Program


class ThreadWorker(Worker):
    can_restart = True
    can_stop_alone = False

    def __init__(self, executable: Executable, scope: runtime.ProgramScope, events: Events,
                 book: address_book.AddressBook | None = None, data: bytes | None = None):
        super().__init__(executable.label, executable.index, executable.description, events)
        self._executable = executable
        self._data = data  # The pickle it came from, so a restart runs a fresh copy.
        self._scope = scope
        self._book = book
        self._thread = threading.Thread(target=self._run, name=f'lp-node-{self.name}', daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        runtime.bind_thread(self._scope)
        runtime.bind_node(runtime.NodeContext(self.label, self.index))
        context = ExecutionContext(self.label, self.index, '127.0.0.1', self._report_ready,
                                   self._scope.stop_event)
        try:
            self._executable.main(context)
        except BaseException as exc:  # Reported to the supervisor, which decides...
            if runtime.ended_by_stop(exc, self._scope):  # ...but a call cut by the stop is none.
                self.events.exited(self, 0, None)
            else:
                self.events.exited(self, 1, FailureReport.from_exception(exc))
        else:
            self.events.exited(self, 0, None)

    def _report_ready(self) -> None:
        # Its servers bound in this process, so the directory knows where they listen.
        if self._book is not None:
            self._book.report(self._book.own(self._executable))
        self.events.ready(self)

    def restarted(self) -> 'ThreadWorker':
        executable = self._executable if self._data is None else serialization.loads(self._data)
        return ThreadWorker(executable, self._scope, self.events, self._book, self._data)

    def request_stop(self) -> None:
        """Nothing to do: the controller stops the scope this thread shares with it."""

    def stack(self) -> str:
        return stuck_threads.thread_stack(self._thread)

    def kill(self) -> bool:
        return False

    def request_metrics(self) -> concurrent.futures.Future:
        # Threads share the process: only this node's servers, but the process's RSS and CPU.
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.set_result(node_metrics.collect(owner_thread=self._thread.ident))
        return future

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)


class _ThreadLaunch(start_program.Launch):
    """What the node threads of one program share: its secret and its address book.

    Threads write to the launching process's terminal (no log files); the nodes are
    the launcher's own objects, so the controller's stop scope is theirs too.
    """

    mode = 'current_terminal'

    def __init__(self, program: Program, executables: list[Executable], test: bool):
        node_logging.configure_launcher()
        if not test:  # Under test_mt, the test framework's capture keeps its plain lines.
            labelled_output.install()
        rundir.sweep()  # Sockets a killed launcher's nodes left; ours are made after this.
        self._program = program.name
        self._issued = program_secret.issue()
        self._servers: list[str] = []  # Filled as nodes report where they listen.
        self._book = address_book.AddressBook(program.name, self._issued, self._servers)
        self._book.expect(executables)
        self._scope: runtime.ProgramScope | None = None

    def attach(self, controller: ProgramController) -> None:
        self._scope = scope = controller.scope
        scope.servers = self._servers
        scope.secret = self._issued.secret
        scope.register_stop_handler(self._book.stop)

    def new_worker(self, executable: Executable, data: bytes, events: Events) -> ThreadWorker:
        return ThreadWorker(executable, self._scope, events, self._book, data)

    def log_line(self, worker: Worker) -> str:
        return f'{worker.name}: this terminal'  # Never asked: threads write no log files.

    def finish(self) -> None:
        self._book.finish()
        self._issued.forget()
        checkpoints.remove_private_root(self._program, self._issued.secret)


def _launch(program: Program, options: LaunchOptions, launch_type: str, test: bool):
    if options.serialize_py_nodes is False:
        prepared = shipping.prepare(program, serialize=False)
    else:
        # Each node gets its own copy of its arguments, as it would in a process;
        # this also reports unpicklable arguments as early as local_mp would.
        prepared = [(serialization.loads(data), data) for _, data in shipping.prepare(program)]
    executables = [executable for executable, _ in prepared]
    # Every node's listeners, and both ends of every connection between nodes, live here.
    check_open_files(program.name, launch_type, len(executables), 8)
    # A node cannot be stopped alone here, so no group grows (grows=False).
    return start_program.start(program, options, launch_type, prepared,
                               lambda: _ThreadLaunch(program, executables, test),
                               keep_process_alive=not test, grows=False)


def launch_local(program: Program, options: LaunchOptions) -> ProgramController:
    return _launch(program, options, 'local_mt', test=False)


def launch_test(program: Program, options: LaunchOptions) -> ProgramController:
    return _launch(program, options, 'test_mt', test=True)
