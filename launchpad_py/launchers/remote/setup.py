"""What the workers of one remote launch share: control listeners, the secret, the address table.

Each ``RemoteWorker`` (``worker.py``) registers here and reports its node's
addresses through ``bound``; the last report completes the table, which every
node then receives with its executable (late binding, see ``launch.py``).
Kept apart from ``worker.py`` so that the worker can name this type without an
import cycle: this module only calls what workers offer, and never names their class
(``launch.py`` completes it into the ``start_program.Launch`` that makes them).
"""

from __future__ import annotations

import ipaddress
import logging
import secrets
import threading

from launchpad_py import courier
from launchpad_py.launchers import start_program
from launchpad_py.node_side import control_channel, flag_transfer
from launchpad_py.program import Program
from launchpad_py.supervision.launch_kit import address_book, program_secret

_log = logging.getLogger(__name__)

HEARTBEAT_S = 1.0
#: A node ends itself after its launcher's host (its kernel) has not answered for this long:
#: TCP keepalive on the node's control connection, which needs no CPU of the launcher process.
HEARTBEAT_TIMEOUT_S = 5.0
#: A node ends itself after this long without a word from the launcher process (frozen, or
#: deadlocked, on a host that still answers). Longer than ``HEARTBEAT_TIMEOUT_S``: a launcher
#: starting hundreds of nodes on a few cores waits seconds for its GIL (measured: 300 pods on
#: 2 cores left every node unpinged for over 5 s, and they ended themselves).
SILENCE_TIMEOUT_S = 30.0


class RemoteSetup(start_program.Launch):
    """What the workers of one program share: control listeners, the secret, the address table."""

    def __init__(self, program: Program, mode: str, test: bool, log_dir: str, keep_logs: bool):
        self.program_name = program.name
        self.mode, self.test, self.log_dir, self.keep_logs = mode, test, log_dir, keep_logs
        self.secret = secrets.token_bytes(32)
        self._issued = program_secret.Issued(self.secret)
        #: Where each node serves, as reported; it answers nodes whose peer moved.
        self.book = address_book.AddressBook(program.name, self._issued, [])
        self.flags = flag_transfer.capture()
        self.workers: dict = {}  # worker id -> its RemoteWorker
        self._gone_ends: list = []  # Ends our rules that calls to moved nodes fail fast.
        self._controls: dict[str, control_channel.ControlServer] = {}
        self._distributed = False
        self._lock = threading.Lock()
        self._closed = threading.Event()

    def control_for(self, ip: str) -> control_channel.ControlServer:
        """The control listener on our interface ``ip`` (one per interface the hosts reach)."""
        with self._lock:
            if ip not in self._controls:
                self._controls[ip] = control_channel.ControlServer(
                    (ip, 0), control_channel.hand_to_workers(self.workers, 6), family='AF_INET')
            return self._controls[ip]

    def bound(self, worker) -> None:
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
            self.book.report({a.key: v for a, v in zip(each.executable.addresses, each.addresses)})
        for each in workers:
            try:
                each.run(self.program_name, self.flags)
            except Exception as exc:  # Checked before the start, so only a surprise lands here.
                each.fail_before_run(f'cannot ship node {each.name}: {type(exc).__name__}: {exc}')

    def _run_late(self, worker) -> None:
        """A node that joined a running program (restarted, or added): it runs at once.

        A restart that could not bind its old port serves on another: its clients
        find it through the book (``relocate``).
        """
        for address, value in zip(worker.executable.addresses, worker.addresses):
            if worker.bind is not None and address.resolve() != value:
                _log.info('restarted node %s serves at %s instead of %s', worker.name, value,
                          address.resolve())
            address.assign(value)
        self.book.report({a.key: v for a, v in zip(worker.executable.addresses, worker.addresses)})
        try:
            worker.run(self.program_name, self.flags)
        except Exception as exc:  # Checked when it was made, so only a surprise lands here.
            worker.fail_before_run(f'cannot ship node {worker.name}: {type(exc).__name__}: {exc}')

    def moved(self, gone: list[str]) -> None:
        """A node that comes back elsewhere (a new pod, at a new IP) left ``gone``: calls
        waiting there, here and in every node, fail (``CourierUnavailableError``), so their
        clients ask the book where it is now (``relocate``) instead of waiting at an IP
        that may never refuse them."""
        if not gone:
            return
        self._gone_ends.append(courier.fail_fast_on_unavailable(gone))
        for worker in list(self.workers.values()):
            worker.send('moved', gone)

    def heartbeat(self) -> None:
        """Pings every node each second; one stalled node delays no other (``worker.ping``)."""
        while not self._closed.wait(HEARTBEAT_S):
            for worker in list(self.workers.values()):
                if worker.needs_heartbeat:  # Not those whose host agent is pinged instead.
                    worker.ping()

    def finish(self) -> None:
        self._closed.set()
        self.book.stop()
        self.book.finish()
        self._issued.forget()
        for end in self._gone_ends:
            end()
        for server in self._controls.values():
            server.close()


def _loopback_in_multi_host(workers: list) -> str | None:
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
