"""``local_mt`` and ``test_mt``: every node is a thread of the launching process.

Node threads share one ``ProgramScope``, so a stop reaches all of them at
once and each stop handler runs once. Threads cannot be killed: when a node
ignores the stop for the grace period, ``local_mt`` ends the launching
process with the stuck nodes' stacks and ``test_mt`` raises (see ``stuck_threads``).
A node that raised can be restarted (a new thread runs a fresh copy of it).
A node of an elastic group has a scope of its own inside the program's
(``runtime.node_scope``), so ``remove_nodes`` stops it alone: its stop handlers and
checkpoint hooks run, its stop event is set, its server stops and its thread returns.
One that has not returned within the grace period is reported with its stack and
ends as ``LEFT_RUNNING`` (a thread cannot be killed); the removal completes for the program.
Node threads are daemon threads, so such a thread does not hold up the program's
stop or the process's exit; the program's end names it again, as left running.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading

from launchpad_py.node_side import checkpoints, node_process, runtime
from launchpad_py.node_side.reporting import labelled_output, node_logging, node_metrics
from launchpad_py.courier import serialization
from launchpad_py.supervision.launch_kit import address_book, program_secret, rundir, shipping
from launchpad_py.supervision import stuck_threads
from launchpad_py.supervision.controller import ProgramController
from launchpad_py.launchers import start_program
from launchpad_py.launchers.local.resources import check_open_files
from launchpad_py.launchers.options import LaunchOptions
from launchpad_py.supervision.worker import Events, FailureReport, Worker
from launchpad_py.program import ExecutionContext, Executable, Program

_log = logging.getLogger('launchpad_py.supervision.controller')


class ThreadWorker(Worker):
    """One node in a thread. ``alone``: the node can be stopped alone (an elastic group's),
    in a scope of its own inside the program's ``scope``."""

    can_restart = True

    def __init__(self, executable: Executable, scope: runtime.ProgramScope, events: Events,
                 book: address_book.AddressBook | None = None, data: bytes | None = None,
                 alone: bool = False, left_running: list | None = None):
        super().__init__(executable.label, executable.index, executable.description, events)
        #: Where a removed node whose thread ran on past its grace is put, for the end's report.
        self._left_running = left_running if left_running is not None else []
        self._executable = executable
        self._data = data  # The pickle it came from, so a restart runs a fresh copy.
        self._program_scope = scope
        self._scope = runtime.node_scope(scope) if alone else scope
        self._book = book
        self._ended = False  # Its end reported (by its thread, or by ``kill`` given up on).
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f'lp-node-{self.name}', daemon=True)

    @property
    def can_stop_alone(self) -> bool:
        return self._scope is not self._program_scope

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
                self._exited(0, None)
            else:
                self._exited(1, FailureReport.from_exception(exc))
        else:
            self._exited(0, None)

    def _exited(self, code: int | None, failure: FailureReport | None) -> None:
        """Reports the node's end once (``kill`` may have reported a stuck one already)."""
        with self._lock:
            if self._ended:
                return
            self._ended = True
        if self.can_stop_alone:
            runtime.end_node_scope(self._program_scope, self._scope)
        self.events.exited(self, code, failure)

    def _report_ready(self) -> None:
        # Its servers bound in this process, so the directory knows where they listen.
        if self._book is not None:
            self._book.report(self._book.own(self._executable))
        self.events.ready(self)

    def served(self) -> dict[str, str]:
        return node_process.bound_addresses(self._executable)

    def restarted(self) -> 'ThreadWorker':
        executable = self._executable if self._data is None else serialization.loads(self._data)
        return ThreadWorker(executable, self._program_scope, self.events, self._book, self._data,
                            alone=self.can_stop_alone, left_running=self._left_running)

    def request_stop(self) -> None:
        """A node of its own scope stops alone (its handlers may block: not on the caller's
        thread); the others share the program's scope, which the controller stops."""
        if self.can_stop_alone:
            threading.Thread(target=self._scope.handle_stop, name=f'lp-stop-{self.name}',
                             daemon=True).start()

    def stack(self, frames: dict | None = None) -> str:
        return stuck_threads.thread_stack(self._thread, frames)

    def kill(self) -> bool:
        """A thread cannot be killed. A node removed alone that ignored its stop for the grace
        period is reported, with its stack, and ends ``LEFT_RUNNING``; its thread runs on unseen."""
        if not (self.can_stop_alone and self.removing) or not self._thread.is_alive():
            return False
        _log.warning('node %s did not return within the grace period after its removal; it '
                     'ends as left_running: its thread runs on (threads cannot be killed):\n%s',
                     self.name, self.stack())
        self._left_running.append(self)
        self.left_running = True  # Its state says so: LEFT_RUNNING, not STOPPED.
        self._exited(None, None)
        return True

    @property
    def thread(self) -> threading.Thread:
        return self._thread

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
        self._elastic = set(program.elastic_groups)
        self._issued = program_secret.issue()
        self._servers: list[str] = []  # Filled as nodes report where they listen.
        self._book = address_book.AddressBook(program.name, self._issued, self._servers)
        self._book.expect(executables)
        self._scope: runtime.ProgramScope | None = None
        self._left_running: list[ThreadWorker] = []  # Removed, but their threads ran on.

    def attach(self, controller: ProgramController) -> None:
        self._scope = scope = controller.scope
        scope.servers = self._servers
        scope.secret = self._issued.secret
        scope.register_stop_handler(self._book.stop)

    def new_worker(self, executable: Executable, data: bytes, events: Events) -> ThreadWorker:
        return ThreadWorker(executable, self._scope, events, self._book, data,
                            alone=executable.label in self._elastic,
                            left_running=self._left_running)

    def log_line(self, worker: Worker) -> str:
        return f'{worker.name}: this terminal'  # Never asked: threads write no log files.

    def finish(self) -> None:
        left = [w for w in self._left_running if w.thread.is_alive()]
        if left:  # Daemon threads: they hold up neither the stop nor the process's exit.
            _log.warning('program %r ended, but the threads of nodes removed earlier still run '
                         '(threads cannot be killed; daemon threads, they do not keep the '
                         'process alive): %s', self._program,
                         ', '.join(f'{w.name} (thread {w.thread.name})' for w in left))
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
    return start_program.start(program, options, launch_type, prepared,
                               lambda: _ThreadLaunch(program, executables, test),
                               keep_process_alive=not test)


def launch_local(program: Program, options: LaunchOptions) -> ProgramController:
    return _launch(program, options, 'local_mt', test=False)


def launch_test(program: Program, options: LaunchOptions) -> ProgramController:
    return _launch(program, options, 'test_mt', test=True)
