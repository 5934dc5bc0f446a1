"""Supervising node processes on other hosts, however they were started.

SSH, Slurm and Kubernetes differ only in how a process gets started on some
host. A launcher module describes that with a ``Placement`` per node (the
local command that starts it, e.g. ``ssh h1 python -m ...``, or a ``Starter``
where no local command reaches the node, e.g. a pod) and calls ``launch``;
everything after the start lives here:

1. Each node process (``node_side/remote_node_main.py``) reads its bootstrap (from its stdin,
   or for a pod from a mounted Secret; see ``Starter``),
   dials back to the launcher over an authenticated TCP control channel and
   reports the ``host:port`` it will serve on (its interface that reaches the
   launcher, and free ports there).
2. Once every node has reported, the launcher fills the address table
   (late binding: nobody knows a node's address before it is placed),
   ships each node its executable, and the nodes build, serve and report ready.
3. Logs come back through the starter (ssh's stdout, a pod's log). The launcher sends a
   heartbeat every second; a node whose channel, heartbeat or stdin ends
   kills its own process group.

A node that joins later (a restart, or a new member of an elastic group)
goes through the same steps alone: its addresses are filled in as it
reports them, and it runs at once.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
from typing import Callable

from launchpad_py import errors
from launchpad_py.launchers import start_program
from launchpad_py.launchers.options import LaunchOptions
from launchpad_py.node_side import checkpoints
from launchpad_py.launchers.remote.setup import HEARTBEAT_S, HEARTBEAT_TIMEOUT_S, RemoteSetup
from launchpad_py.launchers.remote.worker import CommandStarter, Placement, RemoteWorker, Starter
from launchpad_py.program import AbstractAddressBuilder, Executable, Program
from launchpad_py.supervision.launch_kit import output, shipping
from launchpad_py.supervision.controller import ProgramController
from launchpad_py.supervision.worker import Events

__all__ = ['HEARTBEAT_S', 'HEARTBEAT_TIMEOUT_S', 'CommandStarter', 'Placement', 'RemoteWorker',
           'Starter', 'launch', 'node_environment']


def node_environment() -> dict[str, str]:
    """Variables a node on a host sharing our filesystem needs: our import path, unbuffered
    output, and our checkpoint root if we have one (``node_side/checkpoints.py``)."""
    env = {'PYTHONPATH': os.pathsep.join(p for p in sys.path if p and os.path.isdir(p)),
           'PYTHONUNBUFFERED': '1'}
    if os.environ.get(checkpoints.ROOT_ENV):
        env[checkpoints.ROOT_ENV] = os.environ[checkpoints.ROOT_ENV]
    return env


class _Unbound(AbstractAddressBuilder):
    """A placeholder so executables can be built and checked before anyone binds."""

    def build(self) -> str:
        return 'unbound.invalid:0'


def launch(program: Program, options: LaunchOptions, launch_type: str,
           placements: dict[tuple[str, int], Placement],
           place_new: Callable[[str, int], Placement] | None = None,
           on_finish: Callable[[], None] | None = None, *,
           log_dir: str | None = None) -> ProgramController:
    """Starts every executable where ``placements[(label, index)]`` says; returns when all serve.

    ``place_new(label, index)`` places a node added to an elastic group while the
    program runs (None: this launcher cannot add nodes). ``on_finish`` runs once every
    node has ended (e.g. to delete what the scheduler still holds for the program, or
    give a Slurm allocation back). ``log_dir``: a directory where each node's output is
    kept in a file too (Slurm: the job's output directory); by default logs live in a
    temporary directory kept only with ``terminal='output_to_files'``.
    """
    mode = output.check_mode(options.terminal)
    if mode == 'tmux_session':
        raise errors.ProgramError(f"{launch_type} streams node output back; terminal='tmux_session' "
                                  "is for local_mp (use 'current_terminal' or 'output_to_files')")
    for node in program.get_all_nodes():
        for address in node.addresses:
            address.unbind()
    shipping.assign_addresses(program, _Unbound())
    prepared = shipping.prepare(program)  # Checks that every node can be shipped, up front.
    return start_program.start(
        program, options, launch_type, prepared,
        lambda: _Launch(program, mode, log_dir, placements, place_new, on_finish),
        keep_process_alive=True, grows=place_new is not None, builder=_Unbound())


class _Launch(RemoteSetup):
    """A remote launch: its workers placed where the backend says, its logs kept or not."""

    def __init__(self, program: Program, mode: str, log_dir: str | None,
                 placements: dict[tuple[str, int], Placement],
                 place_new: Callable[[str, int], Placement] | None,
                 on_finish: Callable[[], None] | None):
        super().__init__(program, mode, False,
                         log_dir or tempfile.mkdtemp(prefix=f'launchpad_{program.name}_'),
                         keep_logs=log_dir is not None)
        self._placements = placements
        self._place_new = place_new
        self._on_finish = on_finish

    def new_worker(self, executable: Executable, data: bytes, events: Events) -> RemoteWorker:
        del data  # Shipped when the node has reported its addresses.
        key = (executable.label, executable.index)
        # A node added at run time has a new index (they only grow): nobody placed it yet.
        placement = self._placements[key] if key in self._placements else self._place_new(*key)
        return RemoteWorker(executable, placement, self, events)

    def log_line(self, worker: RemoteWorker) -> str:
        return f'{worker.name} ({worker.host}): {worker._sink.log_path}'

    def begin(self) -> None:
        threading.Thread(target=self.heartbeat, name=f'lp-heartbeat-{self.program_name}',
                         daemon=True).start()

    def finish(self) -> None:
        super().finish()
        if self.mode != 'output_to_files' and not self.keep_logs:
            shutil.rmtree(self.log_dir, ignore_errors=True)
        if self._on_finish is not None:
            self._on_finish()
