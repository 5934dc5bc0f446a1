"""The controller driven by simulated workers: a launch with no process, socket or thread per node.

Measures what the launching process alone costs per node (issue 25): the
controller, its supervisor, the address book, statuses, the dashboard and the
Prometheus output, at sizes no machine here could run as processes. A
``SimWorker`` is a test double of ``supervision.worker.Worker``: started, it
reports a made-up address for each of its servers, asks the address book for
the addresses its handles reference (as a node's ``resolve`` would), records
the answers and reports ready; asked to stop, it ends at once.

    program, peers = ring_program(10_000)
    controller, workers = launch(program)
    assert all(w.received.keys() == set(peers[w.name]) for w in workers)
    controller.stop()

Used by ``bench/controller_sim.py`` and ``tests/test_controller_sim.py``.
"""

from __future__ import annotations

import threading

import launchpad_py as lp
from launchpad_py.launchers import start_program
from launchpad_py.launchers.options import LaunchOptions
from launchpad_py.program import Executable, Program
from launchpad_py.supervision.launch_kit import address_book, program_secret, shipping
from launchpad_py.supervision.worker import Events, Worker


class Peer:
    """A node's object that holds handles to other nodes (never built: nothing runs)."""

    def __init__(self, *peers):
        self.peers = peers


def ring_program(workers: int) -> tuple[Program, dict[str, list[str]]]:
    """``workers`` courier nodes in group 'worker', each holding handles to the learner and to
    its two ring neighbours, and one 'learner'; with each node's referenced address keys."""
    program = Program(f'sim_{workers}')
    with program.group('learner'):
        learner = program.add_node(lp.CourierNode(Peer))
    nodes, handles = [], []
    with program.group('worker'):
        for _ in range(workers):
            node = lp.CourierNode(Peer)  # Its handles come below (configure), once all exist.
            handles.append(program.add_node(node))
            nodes.append(node)
    for i, node in enumerate(nodes):
        node.configure(learner, handles[i - 1], handles[(i + 1) % workers])
    references = {}
    for node in program.get_all_nodes():
        keys = [handle.address.key for handle in node.input_handles()]
        references[f'{node.label}/{node.index}'] = keys
    return program, references


class SimWorker(Worker):
    """A node that binds, asks for its peers' addresses and serves, all at once, in no process."""

    def __init__(self, executable: Executable, referenced: list[str],
                 book: address_book.AddressBook, events: Events, port: int):
        super().__init__(executable.label, executable.index, executable.description, events)
        self._executable = executable
        self._referenced = referenced
        self._book = book
        self._port = port
        self.received: dict[str, str] = {}
        self.gone: dict[str, str] = {}

    def start(self) -> None:
        own = {a.key: f'10.{self._port >> 16}.{(self._port >> 8) & 255}.{self._port & 255}:'
                      f'{20000 + self.index % 40000}' for a in self._executable.addresses}
        self._book.report(own)
        self._book.ask(self._referenced, self._answer)
        self.events.ready(self)

    def _answer(self, values: dict[str, str], gone: dict[str, str]) -> None:
        self.received.update(values)
        self.gone.update(gone)

    def request_stop(self) -> None:
        self.events.exited(self, 0, None)

    def kill(self) -> bool:
        return True


class SimLaunch(start_program.Launch):
    """What the simulated workers of one launch share: the address book, as local launches."""

    mode = 'current_terminal'

    def __init__(self, program: Program, references: dict[str, list[str]]):
        self._issued = program_secret.issue()
        self.servers: list[str] = []
        self.book = address_book.AddressBook(program.name, self._issued, self.servers)
        self._references = references
        self.workers: list[SimWorker] = []
        self._lock = threading.Lock()

    def new_worker(self, executable: Executable, data: bytes, events: Events) -> SimWorker:
        self.book.expect([executable])
        with self._lock:
            worker = SimWorker(executable, self._references[f'{executable.label}/'
                                                            f'{executable.index}'],
                               self.book, events, len(self.workers) + 1)
            self.workers.append(worker)
        return worker

    def attach(self, controller) -> None:
        controller.scope.servers = self.servers
        controller.scope.register_stop_handler(self.book.stop)

    def log_line(self, worker: Worker) -> str:
        return worker.name

    def finish(self) -> None:
        self.book.finish()
        self._issued.forget()


def launch(program: Program, references: dict[str, list[str]]):
    """Starts ``program`` on simulated workers; the controller (every node ready) and them."""
    prepared = shipping.prepare(program, serialize=False)  # Nothing is shipped anywhere.
    sim = SimLaunch(program, references)
    controller = start_program.start(program, LaunchOptions(grace=5.0), 'sim', prepared,
                                     lambda: sim, keep_process_alive=False)
    return controller, sim.workers
