"""The same-host path: used when possible, safe, leak-free, and as strict as gRPC."""

from __future__ import annotations

import gc
import os
import stat
import subprocess
import sys
import threading
import time

import numpy as np
import psutil
import pytest

from launchpad_py import courier
from courier_test_nodes import Echo

SERVE = '''
import sys, launchpad_py.courier as courier
sys.path.insert(0, sys.argv[1])
from courier_test_nodes import Echo
server = courier.Server(Echo()).start()
print(server.address, flush=True)
sys.stdin.read()
'''


@pytest.fixture
def remote():
    """An Echo server in a child process; yields (address, process)."""
    process = subprocess.Popen([sys.executable, '-c', SERVE, os.path.dirname(__file__)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        yield process.stdout.readline().strip(), process
    finally:
        process.stdin.close()
        process.kill()
        process.wait(timeout=30)


def _memfd_mappings() -> int:
    with open('/proc/self/maps') as maps:
        return sum('memfd:courier' in line for line in maps)


def test_the_socket_lives_in_a_private_directory():
    """The Unix socket's directory is 0700 and owned by this user."""
    with courier.Server(Echo()) as server:
        directory = os.path.dirname(server.local_path)
        info = os.stat(directory)
        assert stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.getuid()
        assert os.path.exists(server.local_path)


def test_stop_removes_the_socket():
    """After stop the socket file is gone."""
    server = courier.Server(Echo()).start()
    path = server.local_path
    server.stop()
    assert not os.path.exists(path)


def test_calls_use_the_local_socket(remote):
    """A loopback client talks over the Unix socket: its server accepted a connection there."""
    address, process = remote
    client = courier.Client(address)
    assert client.pid() == process.pid
    port = int(address.rsplit(':', 1)[1])
    path = f'/tmp/launchpad_py-{os.getuid()}/courier-{port}.sock'
    sockets = [c for c in psutil.Process(process.pid).net_connections('unix') if c.laddr == path]
    assert len(sockets) >= 2  # The listener and the accepted connection.


def test_falls_back_to_grpc_without_a_local_socket():
    """A server with local_transport=False is still reachable, through gRPC."""
    with courier.Server(Echo(), local_transport=False) as server:
        assert server.local_path is None
        client = courier.Client(server.address)
        assert client.echo(5) == 5
        assert client.futures.echo(6).result(timeout=30) == 6


def test_large_arrays_leave_no_shared_memory_behind(remote):
    """After large calls and dropping the results, no shared-memory mapping stays here."""
    address, _ = remote
    client = courier.Client(address)
    for _ in range(3):
        array = np.ones(8 << 20, np.uint8)
        assert client.total(array) == 8 << 20
        assert client.echo(array).sum() == 8 << 20
    del array
    gc.collect()
    before = _memfd_mappings()
    assert client.total(np.ones(16, np.uint8)) == 16  # Flush releases.
    assert _memfd_mappings() <= before and _memfd_mappings() <= 4


def test_results_survive_the_server(remote):
    """An array received through shared memory stays valid after its server dies."""
    address, process = remote
    array = courier.Client(address).ones(8 << 20)
    process.kill()
    process.wait(timeout=30)
    assert array.sum() == 8 << 20


def test_a_crash_mid_call_is_unavailable(remote):
    """A server that dies during a call gives CourierUnavailableError, not a hang."""
    address, _ = remote
    with pytest.raises(courier.CourierUnavailableError):
        courier.Client(address, timeout=30).crash()


def test_a_crash_fails_pending_futures(remote):
    """Futures in flight when the server dies fail with CourierUnavailableError."""
    address, _ = remote
    client = courier.Client(address, timeout=30)
    assert client.futures.echo(1).result(timeout=30) == 1
    future = client.futures.crash()
    with pytest.raises(courier.CourierUnavailableError):
        future.result(timeout=30)


@pytest.mark.parametrize('timeout', [0.3, 1, __import__('datetime').timedelta(seconds=0.3)])
def test_timeouts_on_the_local_path(timeout):
    """Float, int and timedelta deadlines raise CourierTimeoutError, sync and futures.

    The server's method blocks until the test releases it (not a 1.5 s sleep, which the
    server's stop then waited out after each timeout)."""
    class Slow:
        def __init__(self):
            self.released = threading.Event()

        def sleep(self, seconds):
            self.released.wait(seconds)

    slow = Slow()
    with courier.Server(slow) as server:
        client = courier.Client(server.address, timeout=timeout)
        try:
            with pytest.raises(courier.CourierTimeoutError, match="'sleep'"):
                client.sleep(30)
            with pytest.raises(courier.CourierTimeoutError, match="'sleep'"):
                client.futures.sleep(30).result(timeout=30)
        finally:
            slow.released.set()


def test_no_timeout_when_falsy():
    """timeout=0 means no deadline on the local path."""
    class Slow:
        def sleep(self, seconds):
            time.sleep(seconds)
            return seconds

    with courier.Server(Slow()) as server:
        assert courier.Client(server.address, timeout=0).sleep(0.2) == 0.2


def test_unknown_method_on_the_local_path():
    """An unknown method raises UnknownMethodError naming the method and the choices."""
    with courier.Server(Echo(), label='echo') as server:
        with pytest.raises(courier.UnknownMethodError, match="'nope'.*available: .*echo"):
            courier.Client(server.address).nope()


def test_remote_exception_on_the_local_path():
    """A remote exception keeps its type, traceback, node label and method."""
    class Failing:
        def fail(self):
            raise LookupError('missing')

    with courier.Server(Failing(), label='failing') as server:
        with pytest.raises(LookupError, match='missing') as info:
            courier.Client(server.address).futures.fail().result(timeout=30)
    assert 'in fail' in info.value.remote_traceback
    assert any("'failing'" in note and "'fail'" in note for note in info.value.__notes__)


def test_waits_for_a_server_that_starts_later():
    """With wait_for_ready, a call made before the server exists completes once it starts."""
    import portpicker
    import threading
    port = portpicker.pick_unused_port()
    client = courier.Client(f'127.0.0.1:{port}', timeout=30)
    started = threading.Event()
    server = courier.Server(Echo(), port=port)

    def start_later():
        started.wait(timeout=30)
        server.start()

    thread = threading.Thread(target=start_later)
    thread.start()
    future = client.futures.echo('late')
    started.set()
    try:
        assert future.result(timeout=30) == 'late'
        assert client.echo('then local') == 'then local'
    finally:
        thread.join(timeout=30)
        server.stop()


@pytest.mark.parametrize('transport', ['auto', 'grpc', 'tcp'])
def test_unserializable_arguments_and_results_say_why(transport):
    """An argument or a result that cannot be pickled gives a TypeError naming it."""
    import threading

    class Holder:
        def lock(self):
            return threading.Lock()

    with courier.Server(Holder()) as server:
        client = courier.Client(server.address, transport=transport, timeout=30)
        with pytest.raises(TypeError, match="cannot serialize the arguments of 'lock'"):
            client.lock(threading.Lock())
        with pytest.raises(TypeError, match='cannot serialize the result \\(a lock\\)'):
            client.lock()


@pytest.mark.parametrize('transport', ['auto', 'tcp'])
def test_a_future_whose_result_cannot_travel_says_why_and_the_connection_goes_on(transport):
    """On a futures connection (whose reader runs calls inline) an unpicklable result fails
    only its own future, with the TypeError; the calls after it on the same connection work."""
    import threading

    class Holder:
        def lock(self):
            return threading.Lock()

        def echo(self, x):
            return x

    with courier.Server(Holder()) as server:
        client = courier.Client(server.address, transport=transport, timeout=30)
        futures = [client.futures.echo(1), client.futures.lock(), client.futures.echo(2)]
        assert futures[0].result(timeout=30) == 1
        with pytest.raises(TypeError, match='cannot serialize the result \\(a lock\\)'):
            futures[1].result(timeout=30)
        assert futures[2].result(timeout=30) == 2
        assert client.futures.echo(3).result(timeout=30) == 3
