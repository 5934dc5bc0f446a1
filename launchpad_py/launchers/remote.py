"""Supervising node processes on other hosts, however they were started.

SSH, Slurm and Kubernetes differ only in how a process gets started on some
host. A launcher module describes that with a ``Placement`` per node (the
local command that starts it, e.g. ``ssh h1 python -m ...``, or a ``Starter``
where no local command reaches the node, e.g. a pod) and calls ``launch``;
everything after the start lives here:

1. Each node process (``remote_node.py``) reads its bootstrap (from its stdin,
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

import ipaddress
import os
import secrets
import shutil
import sys
import tempfile
import threading
from typing import Callable

from launchpad_py import courier, errors, flag_transfer
from launchpad_py.launchers import control, elastic, output, shipping
from launchpad_py.launchers.controller import ProgramController
from launchpad_py.launchers.options import LaunchOptions
from launchpad_py.launchers.remote_worker import (HEARTBEAT_S, HEARTBEAT_TIMEOUT_S,
                                                  CommandStarter, Placement, RemoteWorker, Starter)
from launchpad_py.program import AbstractAddressBuilder, Program

__all__ = ['HEARTBEAT_S', 'HEARTBEAT_TIMEOUT_S', 'CommandStarter', 'Placement', 'RemoteWorker',
           'Starter', 'launch', 'node_environment']


def node_environment() -> dict[str, str]:
    """Variables a node on a host sharing our filesystem needs: our import path, unbuffered output."""
    return {'PYTHONPATH': os.pathsep.join(p for p in sys.path if p and os.path.isdir(p)),
            'PYTHONUNBUFFERED': '1'}


class _Unbound(AbstractAddressBuilder):
    """A placeholder so executables can be built and checked before anyone binds."""

    def build(self) -> str:
        return 'unbound.invalid:0'


class RemoteSetup:
    """What the workers of one program share: control listeners, the secret, the address table."""

    def __init__(self, program: Program, mode: str, test: bool, log_dir: str, keep_logs: bool):
        self.program_name = program.name
        self.mode, self.test, self.log_dir, self.keep_logs = mode, test, log_dir, keep_logs
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
                self._controls[ip] = control.ControlServer(
                    (ip, 0), control.hand_to_workers(self.workers, 6), family='AF_INET')
            return self._controls[ip]

    def bound(self, worker: RemoteWorker) -> None:
        """Called as each node reports its addresses; the last one completes the table."""
        with self._lock:
            late = self._distributed
            if not late and any(w.addresses is None for w in self.workers.values()):
                return
            self._distributed = True
        if late:
            self._run_late(worker)
            return
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

    def _run_late(self, worker: RemoteWorker) -> None:
        """A node that joined a running program (restarted, or added): it runs at once."""
        for address, value in zip(worker.executable.addresses, worker.addresses):
            if worker.bind is None:
                address.assign(value)
            elif address.resolve() != value:
                worker.fail_before_run(f'restarted node {worker.name} reported {value} instead of '
                                       f'its address {address.resolve()}')
                return
            courier.register_secret(value, self.secret)
            self._registered.append(value)
        try:
            worker.run(self.program_name, self.flags)
        except Exception as exc:  # Checked when it was made, so only a surprise lands here.
            worker.fail_before_run(f'cannot ship node {worker.name}: {type(exc).__name__}: {exc}')

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
    hosts = {w.host for w in workers}
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

    def new_worker(executable, data: bytes) -> RemoteWorker:
        del data  # Shipped when the node has reported its addresses.
        return RemoteWorker(executable, place_new(executable.label, executable.index), setup,
                            controller.events)

    groups = elastic.groups_of(program, new_worker if place_new else None, _Unbound())
    keep_logs = log_dir is not None
    log_dir = log_dir or tempfile.mkdtemp(prefix=f'launchpad_{program.name}_')
    setup = RemoteSetup(program, mode, False, log_dir, keep_logs)

    def finish() -> None:
        setup.finish()
        if mode != 'output_to_files' and not keep_logs:
            shutil.rmtree(log_dir, ignore_errors=True)
        if on_finish is not None:
            on_finish()

    controller = ProgramController(program.name, launch_type, options.grace,
                                   keep_process_alive=True, on_finish=finish,
                                   failure_policy=options.failure_policy, groups=groups)
    workers = [RemoteWorker(executable, placements[executable.label, executable.index], setup,
                            controller.events) for executable, _ in prepared]
    if mode == 'output_to_files':
        print(f'launchpad_py: node logs of {program.name!r}:', flush=True)
        for worker in workers:
            print(f'  {worker.name} ({worker.host}): {worker._sink.log_path}', flush=True)
    threading.Thread(target=setup.heartbeat, name=f'lp-heartbeat-{program.name}',
                     daemon=True).start()
    return controller.start(workers, options.ready_timeout)
