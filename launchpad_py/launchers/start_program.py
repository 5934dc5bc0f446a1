"""The launch sequence that local processes and every multi-host backend share.

Once a backend has checked the program and prepared its executables, the steps
are the same everywhere; only their content differs:

1. the program's groups, and how a node added at run time becomes a worker;
2. ``open_launch()``: what the launch holds from here on (the program secret,
   a run directory, control listeners), given back by its ``finish``;
3. the controller, and what it must know before any node runs (``attach``: the
   launching process's address table and stop scope, the inbox workers post to);
4. a worker per executable, their log files listed when output goes to files;
5. ``begin`` (e.g. the heartbeat nodes on other hosts wait for), then the
   controller starts the workers and returns once every node is ready.

    return start_program.start(program, options, 'local_mp', prepared,
                               lambda: _ProgramSetup(...), keep_process_alive=True)

``local/processes.py`` and ``remote/launch.py`` each write only their ``Launch``.
"""

from __future__ import annotations

import abc
from typing import Callable

from launchpad_py.launchers.options import LaunchOptions
from launchpad_py.program import AbstractAddressBuilder, Executable, Program
from launchpad_py.supervision import elastic
from launchpad_py.supervision.controller import ProgramController
from launchpad_py.supervision.worker import Events, Worker


class Launch(abc.ABC):
    """One backend's launch of one program: what its workers share, and its steps.

    ``mode`` is the terminal mode (``supervision/launch_kit/output.py``).
    """

    mode: str

    @abc.abstractmethod
    def new_worker(self, executable: Executable, data: bytes, events: Events) -> Worker:
        """An unstarted worker for ``executable`` (``data``: its pickle), posting to ``events``;
        also for a node added to an elastic group while the program runs."""

    @abc.abstractmethod
    def log_line(self, worker: Worker) -> str:
        """Where ``worker``'s output file is, as listed with ``terminal='output_to_files'``."""

    @abc.abstractmethod
    def finish(self) -> None:
        """Gives back what the launch holds, once every node has ended (or the start failed)."""

    def attach(self, controller: ProgramController) -> None:
        """What the controller must know before the first worker is made."""

    def begin(self) -> None:
        """Runs once the workers are made, just before they start."""


def start(program: Program, options: LaunchOptions, launch_type: str,
          prepared: list[tuple[Executable, bytes]], open_launch: Callable[[], Launch], *,
          keep_process_alive: bool, grows: bool = True,
          builder: AbstractAddressBuilder | None = None) -> ProgramController:
    """Starts ``prepared`` (``shipping.prepare``) the way ``open_launch()`` says; returns the
    controller once every node is ready. ``grows``: whether nodes can be added at run time;
    ``builder`` gives their addresses (None: the default local one)."""
    launch: Launch | None = None
    controller: ProgramController | None = None

    def new_worker(executable: Executable, data: bytes) -> Worker:
        return launch.new_worker(executable, data, controller.events)

    groups = elastic.groups_of(program, new_worker if grows else None, builder)
    launch = open_launch()  # After every check: from here on, its finish gives back.
    controller = ProgramController(program.name, launch_type, options.grace,
                                   keep_process_alive=keep_process_alive, on_finish=launch.finish,
                                   failure_policy=options.failure_policy, groups=groups)
    launch.attach(controller)
    workers = [new_worker(executable, data) for executable, data in prepared]
    if launch.mode == 'output_to_files':
        print(f'launchpad_py: node logs of {program.name!r}:', flush=True)
        for worker in workers:
            print(f'  {launch.log_line(worker)}', flush=True)
    launch.begin()
    return controller.start(workers, options.ready_timeout)
