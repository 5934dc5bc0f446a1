"""A courier server's listeners start their threads on their first connection, not before.

grpc's Python server thread wakes five times a second even when idle; at 1,000 local
nodes that, with grpc's own threads, was ≈0.75 of a core (docs/performance.md, Scale);
the socket listeners' accept threads cost a thread (a pid) each per node.
"""

from __future__ import annotations

import gc
import os
import socket
import threading
import weakref

import pytest

from launchpad_py import courier
from launchpad_py.courier.transports.sockets import first_connection
from courier_test_nodes import Echo


def _grpc_serving_threads() -> list[str]:
    # grpc names its serving thread after its target, grpc._server._serve.
    return [t.name for t in threading.enumerate() if t.name.endswith('(_serve)')]


def _accept_threads() -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t.name.startswith('courier-idle-'))


def test_an_idle_server_runs_no_listener_thread():
    """A started server nobody called holds no accept or serving thread."""
    before = _grpc_serving_threads()
    with courier.Server(Echo(), label='idle'):
        assert _accept_threads() == []
        assert _grpc_serving_threads() == before


def test_a_server_called_over_the_unix_socket_runs_no_grpc_serving_thread():
    """Called only over the Unix socket, a server starts that listener's thread alone."""
    before = _grpc_serving_threads()
    with courier.Server(Echo(), label='idle') as server:
        assert courier.Client(server.address).echo(3) == 3
        assert _grpc_serving_threads() == before
        assert 'courier-idle-tcp' not in _accept_threads()


@pytest.mark.parametrize('transport', ['grpc', 'tcp'])
def test_the_first_grpc_connection_is_answered(transport):
    """A client that dials the address's port (gRPC, or raw TCP, which asks gRPC for its
    port) is answered: the serving thread starts when its connection arrives."""
    with courier.Server(Echo()) as server:
        assert courier.Client(server.address, transport=transport).echo('hi') == 'hi'


def test_a_server_stopped_before_any_connection_releases_its_port():
    """Stopped while still waiting for its first connection, a server frees its port."""
    server = courier.Server(Echo()).start()
    port = server.port
    server.stop()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(('127.0.0.1', port), timeout=5).close()


def test_a_server_bound_to_a_name_serves_at_once():
    """Bound to a host name (which gRPC may bind once per address), the server does not wait."""
    with courier.Server(Echo(), host='localhost') as server:
        assert len(_grpc_serving_threads()) >= 1
        assert courier.Client(server.address, transport='grpc').echo(1) == 1


def test_finding_the_listening_socket_leaves_no_descriptor_open():
    """Looking through the process's descriptors for a listening socket (pipes, epoll and
    files among them) leaves none of its duplicates behind: before, each non-socket it
    looked at stayed open, and local_mt launches of 300 nodes ran out of descriptors."""
    def open_descriptors() -> int:
        return len(os.listdir('/proc/self/fd'))

    pipes = [os.pipe() for _ in range(10)]  # Non-sockets in the search's way.
    listener = socket.create_server(('127.0.0.1', 0))
    try:
        before = open_descriptors()
        found = first_connection.listening_descriptor(listener.getsockname()[1],
                                                      since=pipes[0][0])
        assert found == listener.fileno()
        assert open_descriptors() == before
    finally:
        listener.close()
        for read, write in pipes:
            os.close(read)
            os.close(write)


def test_waiting_servers_hold_no_extra_descriptors():
    """A server waiting for its first connection holds no descriptor beyond its listening
    sockets (watched as they are): with a duplicate of each, 2,000 local_mt nodes in one
    process passed an open-file limit of 20,000."""
    def open_descriptors() -> int:
        return len(os.listdir('/proc/self/fd'))

    with courier.Server(Echo()):  # gRPC's own descriptors, opened once per process.
        pass
    before = open_descriptors()
    servers = [courier.Server(Echo()).start() for _ in range(10)]
    try:
        per_server = (open_descriptors() - before) / 10
        # Listening sockets and gRPC's own (its poller and wake-up sockets): 6.2 per server
        # before servers waited for connections, 8.9 with a duplicate of each watched one.
        assert per_server <= 6.5
    finally:
        for server in servers:
            server.stop()


def test_a_listening_socket_below_where_the_search_starts_is_found_at_once():
    """A listening socket that took a descriptor below the search's start (another thread
    closed one there meanwhile) is found within a few descriptors of the start: the upward
    search looked through its whole window of 4,096 first."""
    listener = socket.create_server(('127.0.0.1', 0))
    fd = listener.fileno()
    looked_at = []
    real = first_connection._listening_on

    def counting(fd: int, port: int) -> bool:
        looked_at.append(fd)
        return real(fd, port)

    first_connection._listening_on = counting
    try:
        found = first_connection.listening_descriptor(listener.getsockname()[1],
                                                      since=fd + 3)
    finally:
        first_connection._listening_on = real
        listener.close()
    assert found == fd
    assert len(looked_at) <= 7


class _OwnedLock:
    """A lock that knows which thread holds it."""

    def __init__(self):
        self._lock, self.owner = threading.Lock(), None

    def __enter__(self):
        self._lock.acquire()
        self.owner = threading.get_ident()

    def __exit__(self, *exc):
        self.owner = None
        self._lock.release()


class _LockWatchingEpoll:
    """The watcher's epoll, noting each register or unregister its caller made while
    holding the watcher's lock."""

    def __init__(self, watcher):
        self._lock, self._real = watcher._lock, watcher._epoll
        self.under_lock = []

    def register(self, fd, mask):
        self._note('register', fd)
        return self._real.register(fd, mask)

    def unregister(self, fd):
        self._note('unregister', fd)
        return self._real.unregister(fd)

    def poll(self, *args):
        return self._real.poll(*args)

    def close(self):
        self._real.close()

    def _note(self, what: str, fd: int) -> None:
        if self._lock.owner == threading.get_ident():
            self.under_lock.append((what, fd))


def test_watching_and_forgetting_make_no_system_call_under_the_lock():
    """Every node's server takes the watcher's lock to watch and (three times) to forget;
    a system call under it hands the GIL to threads that then queue on the lock. 2,000
    local_mt nodes stopping at once so took 9 s, and one launch in three outlived the grace
    period: each watch and forget made its epoll call under the lock."""
    watcher = first_connection._Watcher()
    watcher._lock = _OwnedLock()
    epoll = watcher._epoll = _LockWatchingEpoll(watcher)
    listeners = [socket.create_server(('127.0.0.1', 0)) for _ in range(3)]
    started = threading.Event()
    threads_before = set(threading.enumerate())
    try:
        for listener in listeners:
            watcher.watch(listener.fileno(), started.set)
        socket.create_connection(listeners[0].getsockname()).close()
        assert started.wait(10)  # The first connection started its listener.
        for listener in listeners[1:]:
            watcher.forget(listener.fileno())
        for thread in set(threading.enumerate()) - threads_before:
            thread.join(10)  # With nothing left to watch, the watcher's thread ends.
            assert not thread.is_alive()
    finally:
        for listener in listeners:
            listener.close()
        watcher.close_in_child()
    assert epoll.under_lock == []


def test_forget_takes_no_lock_that_another_thread_holds():
    """Forgetting does not wait for the watcher's lock: 2,000 local_mt nodes stopping at
    once queued their 6,000 forgets on it, 74 s with four busy threads
    (bench/forget_convoy.json), and the 2,000-node stop outlived its grace period. Here the
    lock is held by this thread throughout; forget must finish regardless."""
    watcher = first_connection._Watcher()
    listeners = [socket.create_server(('127.0.0.1', 0)) for _ in range(2)]
    before = set(threading.enumerate())
    try:
        for listener in listeners:
            watcher.watch(listener.fileno(), lambda: None)
        watching, = (thread for thread in set(threading.enumerate()) - before
                     if thread.name == 'courier-grpc-first-connection')
        forgotten = threading.Event()

        def forget_all():
            for listener in listeners:
                watcher.forget(listener.fileno())
            forgotten.set()

        with watcher._lock:
            forgetter = threading.Thread(target=forget_all, daemon=True)
            forgetter.start()
            assert forgotten.wait(10), 'forget waited for the watcher lock'
        # The last forget woke the watcher's thread, which ends now that the lock is free
        # (its descriptors are closed below only after it ended).
        watching.join(30)
        assert not watching.is_alive()
        assert watcher._waiting == {}
        # Forgotten means unregistered: a second unregister of the same descriptor fails.
        with pytest.raises(FileNotFoundError):
            watcher._epoll.unregister(listeners[0].fileno())
    finally:
        for listener in listeners:
            listener.close()
        watcher.close_in_child()


def test_a_port_never_dialled_can_be_bound_again_after_stop():
    """The port of a server stopped before any gRPC connection is free for a new bind at
    once, and for a new courier server on that same port."""
    server = courier.Server(Echo()).start()
    port = server.port
    server.stop()
    with socket.create_server(('127.0.0.1', port)):
        pass
    with courier.Server(Echo(), port=port) as again:
        assert courier.Client(again.address, transport='grpc').echo(2) == 2


def test_a_server_stopped_never_dialled_lets_its_object_go():
    """Nothing of a server stopped before any gRPC connection holds the served object:
    stopped servers' objects (a learner's arrays) are freed."""
    class Held:
        def ping(self):
            return 1

    obj = Held()
    gone = weakref.ref(obj)
    courier.Server(obj).start().stop()
    del obj
    gc.collect()
    assert gone() is None


def test_servers_stopped_never_dialled_keep_no_descriptor():
    """A process that starts and stops many servers (many local_mt programs) ends with the
    descriptors it began with: a never-dialled gRPC listener kept after its stop would hold
    one each, and such a process once passed descriptor 1,024 (select() then fails)."""
    def descriptors() -> int:
        return len(os.listdir('/proc/self/fd'))

    courier.Server(Echo()).start().stop()  # Whatever a first server sets up once.
    gc.collect()
    before = descriptors()
    for _ in range(40):
        courier.Server(Echo()).start().stop()
    gc.collect()
    assert descriptors() - before < 5
