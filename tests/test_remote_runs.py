"""A remote node's runs: the launcher hears from its current run only.

A restarted node on Kubernetes is a new pod, while its old pod's container may
still be running: deleted through the API before its node dialed back, it
dials back after the restart began. Here the starters start nothing; the test
dials the launcher's control listener with each run's bootstrap, as the node
processes do.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing.connection as mpc
import os
import threading
import time

import launchpad_py as lp
from launchpad_py.launchers.remote.setup import HEARTBEAT_S, RemoteSetup
from launchpad_py.launchers.remote import worker as worker_module
from launchpad_py.launchers.remote.worker import Placement, RemoteWorker, Starter
from launchpad_py.supervision.worker import Events, Exited

from conftest import wait_for


@dataclasses.dataclass
class _Executable:
    """What the launcher reads of a node's executable (no address: nothing to wait for)."""
    label: str = 'params'
    index: int = 0
    description: str = 'params'
    addresses: tuple = ()


class _Setup(RemoteSetup):
    def new_worker(self, executable, data, events):
        raise NotImplementedError

    def log_line(self, worker) -> str:
        return worker.name


class _NewPod(Starter):
    """A run started nowhere: its bootstrap kept for the test, its end when the test says."""

    keeps_addresses = False

    def __init__(self):
        self.boot: dict | None = None
        self.ended = threading.Event()

    def start(self, boot, sink) -> None:
        self.boot = boot

    def wait(self) -> int | None:
        self.ended.wait()
        return 0

    def terminate(self) -> bool:
        self.ended.set()
        return True

    def again(self, host):
        return _NewPod()


def _started(tmp_path) -> tuple[_Setup, RemoteWorker]:
    """A launch's shared parts and one node's first run, started (nowhere)."""
    setup = _Setup(lp.Program('runs'), 'output_to_files', True, str(tmp_path), False)
    worker = RemoteWorker(_Executable(), Placement([], 'h1', '127.0.0.1', starter=_NewPod()),
                          setup, Events())
    worker.start()
    return setup, worker


def _dial(boot: dict) -> mpc.Connection:
    """Says hello as the node process of ``boot`` does (remote_node_main)."""
    connection = mpc.Client(tuple(boot['control']), family='AF_INET',
                            authkey=bytes.fromhex(boot['key']))
    connection.send(('hello', boot['worker_id'], os.getpid(), os.getpgrp(), [], None))
    return connection


def _closed_by_launcher(connection: mpc.Connection) -> bool:
    """Whether the launcher closed the connection (rather than sending it something)."""
    assert connection.poll(10), 'the launcher neither closed the channel nor spoke'
    try:
        connection.recv()
        return False
    except EOFError:
        return True


def test_a_node_s_earlier_run_dialing_back_late_is_refused_and_its_restart_is_not(tmp_path):
    """The first run's process dials back only after the node was restarted: its hello is
    refused (the channel closed: it ends itself), and the restart's own is taken (it is
    sent its executable). Under one id per node the late first run passed for the restart."""
    setup, first = _started(tmp_path)
    restart = first.restarted()
    restart.start()
    connections = []
    try:
        connections.append(_dial(first._starter.boot))
        assert _closed_by_launcher(connections[-1])
        connections.append(_dial(restart._starter.boot))
        assert not _closed_by_launcher(connections[-1])
    finally:
        _end(setup, [first, restart], connections)


def _end(setup: _Setup, workers: list[RemoteWorker], connections: list[mpc.Connection]) -> None:
    """Closes the test's ends, ends the runs (their starters) and the launch."""
    for connection in connections:
        connection.close()
    for worker in workers:
        worker._starter.ended.set()
    setup.finish()


def _ends_within(connection: mpc.Connection, seconds: float) -> bool:
    """Whether the launcher closes the connection within ``seconds`` (messages read past)."""
    deadline = time.monotonic() + seconds
    while connection.poll(max(deadline - time.monotonic(), 0)):
        try:
            connection.recv()
        except EOFError:
            return True
    return False


def test_a_run_still_connected_when_its_pod_is_gone_is_cut_off(tmp_path, monkeypatch):
    """The starter says the run ended (its pod deleted), yet its node is still connected
    (the container not stopped yet): within the wait for its last words (5 s; 0.5 s here)
    the launcher cuts its channel, so it ends itself instead of serving beside its restart."""
    monkeypatch.setattr(worker_module, 'LAST_WORDS_S', 0.5)
    setup, worker = _started(tmp_path)
    connection = _dial(worker._starter.boot)
    try:
        assert connection.poll(10)  # Taken: the launcher sends it its executable.
        worker._starter.ended.set()
        assert _ends_within(connection, 15)
    finally:
        connection.close()
        setup.finish()


def test_a_run_dialing_back_after_its_pod_is_gone_is_refused(tmp_path):
    """Its pod deleted before its node dialed back (the starter ended): the node's late
    hello is refused, before the restart even began; taken, it was sent its executable
    and served beside its restart."""
    setup, worker = _started(tmp_path)
    worker._starter.ended.set()
    assert isinstance(worker.events.queue.get(timeout=10), Exited)  # Its end is reported.
    connection = _dial(worker._starter.boot)
    try:
        assert _closed_by_launcher(connection)
    finally:
        connection.close()
        setup.finish()


def test_killing_a_run_cuts_its_channel_at_once(tmp_path):
    """A node that ignored its stop is killed after the grace: its control connection ends
    at once (it then kills its own process group). Closing it alone, while the launcher's
    thread waited in recv, told the node nothing until its heartbeat ran out."""
    setup, worker = _started(tmp_path)
    connection = _dial(worker._starter.boot)
    try:
        assert connection.poll(10)  # Taken: the launcher sends it its executable.
        worker.kill()
        assert _ends_within(connection, 1)
    finally:
        connection.close()
        worker._starter.ended.set()
        setup.finish()


@contextlib.contextmanager
def _reader_paused_before_its_read():
    """(An event set when a worker's channel thread is about to read its socket, and one
    that lets it go on): the thread stops at the start of ``Connection._recv``, after
    ``recv`` checked the connection is open and before it takes its descriptor."""
    entered, go_on = threading.Event(), threading.Event()

    def trace(frame, event, arg):
        if (event == 'call' and frame.f_code.co_name == '_recv' and not entered.is_set()
                and threading.current_thread().name.startswith('lp-channel-')):
            entered.set()
            go_on.wait(10)

    threading.settrace(trace)  # Threads started from now on: the worker's channel thread.
    try:
        yield entered, go_on
    finally:
        threading.settrace(None)
        go_on.set()


def test_killing_a_run_while_its_channel_is_read_ends_the_reader_cleanly(tmp_path,
                                                                        monkeypatch):
    """A kill during the program's stop cut and closed the channel while the launcher's
    channel thread was between ``recv``'s check and its read: the thread then read
    descriptor None ("TypeError: 'NoneType' object cannot be interpreted as an integer",
    issue 25's failed fan-in). Now the reader ends on the cut and closes the channel itself."""
    failures = []
    monkeypatch.setattr(threading, 'excepthook', failures.append)
    with _reader_paused_before_its_read() as (entered, go_on):
        setup, worker = _started(tmp_path)
        connection = _dial(worker._starter.boot)
        try:
            assert entered.wait(10), 'the channel thread never read its channel'
            worker.kill()
            go_on.set()
            wait_for(lambda: failures or worker._channel_closed.is_set(), 10,
                     'the channel thread ending')
            assert not failures, [repr(f.exc_value) for f in failures]
        finally:
            connection.close()
            worker._starter.ended.set()
            setup.finish()


def test_a_stalled_node_delays_no_other_node_s_heartbeat(tmp_path):
    """A node that stopped reading (its process stalled) while the launcher ships it a large
    message holds that send; the heartbeat passes it by, and the next node keeps hearing a
    ping every second. Pinged in turn with blocking sends, the heartbeat waited behind the
    stalled send, and every node after it ended itself."""
    setup = _Setup(lp.Program('runs'), 'output_to_files', True, str(tmp_path), False)
    stalled, healthy = (RemoteWorker(_Executable(index=i), Placement(
        [], 'h1', '127.0.0.1', starter=_NewPod()), setup, Events()) for i in (0, 1))
    connections = []
    try:
        for worker in (stalled, healthy):
            worker.start()
            connections.append(_dial(worker._starter.boot))
        assert connections[1].recv()[0] == 'run'  # Both taken: the program runs.
        threading.Thread(target=stalled.send, args=('members', b'x' * (64 << 20)),
                         daemon=True).start()  # Never read: it fills the socket and waits.
        wait_for(lambda: stalled._channel._lock.locked(), what='the stalled send')
        threading.Thread(target=setup.heartbeat, daemon=True).start()
        for _ in range(3):
            assert connections[1].poll(2 * HEARTBEAT_S), 'no ping within two periods'
            assert connections[1].recv() == ('ping',)
    finally:
        _end(setup, [stalled, healthy], connections)


class _PingedOnArrival(dict):
    """A launch's workers, each pinged the moment it is registered: the heartbeat thread
    pings whatever worker it finds there, at any moment."""

    def __setitem__(self, worker_id: str, worker: RemoteWorker) -> None:
        super().__setitem__(worker_id, worker)
        if worker.needs_heartbeat:
            worker.send('ping')


def test_a_worker_is_registered_only_once_it_is_built(tmp_path):
    """A node's first run and its restart can be pinged as soon as the heartbeat sees them.
    The restart's worker was registered before it had a starter: the heartbeat thread
    failed on it (AttributeError) and ended, and 5 s later every node ended itself."""
    setup = _Setup(lp.Program('runs'), 'output_to_files', True, str(tmp_path), False)
    setup.workers = _PingedOnArrival()
    try:
        first = RemoteWorker(_Executable(), Placement([], 'h1', '127.0.0.1', starter=_NewPod()),
                             setup, Events())
        restart = first.restarted()
        assert list(setup.workers.values()) == [restart]
    finally:
        setup.finish()


class _DeletedPod(_NewPod):
    """A run whose pod is deleted through the API when it ends (its container runs on)."""

    def taken_away(self) -> str | None:
        return 'pod p was deleted while the program ran' if self.ended.is_set() else None


def test_a_run_whose_pod_was_deleted_is_cut_off_at_once(tmp_path):
    """Its pod deleted while its node still runs (podman stops the container seconds later):
    the launcher cuts the node's channel and reports its end at once. It waited 5 s for last
    words that could not change the verdict, and a deleted coordinator's program took 7.3 s
    to stop."""
    setup = _Setup(lp.Program('runs'), 'output_to_files', True, str(tmp_path), False)
    worker = RemoteWorker(_Executable(), Placement([], 'h1', '127.0.0.1', starter=_DeletedPod()),
                          setup, Events())
    worker.start()
    connection = _dial(worker._starter.boot)
    try:
        assert connection.poll(10)  # Taken: the launcher sends it its executable.
        worker._starter.ended.set()
        assert _ends_within(connection, 2)
        event = worker.events.queue.get(timeout=2)
        assert isinstance(event, Exited) and 'was deleted' in event.failure.summary, event
    finally:
        connection.close()
        setup.finish()
