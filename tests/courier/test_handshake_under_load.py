"""Handshakes when a server is slow to take them (issue 25: 1,000 clients dialling one server
over ssh at load 90, where one client's handshake timed out and failed its node): the
raw-TCP one, and the gRPC first contact (``Endpoints``) every client makes before it.

The server is slowed for real: its door's greeting (``tcp_handshakes.server_hello``) waits
for an event the test sets, or the door's ``admit`` does, or a proxy holds the client's
bytes to its gRPC port; nothing sleeps to synchronize.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading

import grpc
import pytest

from launchpad_py import courier
from launchpad_py.courier import auth
from launchpad_py.courier.transports import grpc_server, tcp, tcp_handshakes
from frame_loops import loop  # noqa: F401 (a fixture)

SECRET = b'handshake-under-load-secret-32by'


class Echo:
    def echo(self, value):
        return value


@contextlib.contextmanager
def _released_on_first_retry(release: threading.Event):
    """Sets ``release`` once a client logs that it dials again (its first handshake timed
    out): the server is held exactly until a client has been failed by it."""
    retried = threading.Event()

    class Seen(logging.Handler):
        def emit(self, record):
            if 'dialling again' in record.getMessage():
                retried.set()

    def release_after_retry():
        if retried.wait(30):
            release.set()

    logger, seen = logging.getLogger('launchpad_py.courier'), Seen()
    old_level = logger.level
    logger.addHandler(seen)
    logger.setLevel(logging.INFO)
    watcher = threading.Thread(target=release_after_retry)
    watcher.start()
    try:
        yield retried
    finally:
        retried.set()
        watcher.join(timeout=30)
        logger.removeHandler(seen)
        logger.setLevel(old_level)


@pytest.fixture
def held_greetings(monkeypatch):
    """The servers' doors greet only once the yielded event is set."""
    release = threading.Event()
    greet = tcp_handshakes.server_hello

    def held(identity):
        release.wait(30)
        return greet(identity)

    monkeypatch.setattr(tcp_handshakes, 'server_hello', held)
    yield release
    release.set()


def test_a_call_without_deadline_dials_again_until_a_slow_server_greets(
        loop, held_greetings, monkeypatch):  # noqa: F811
    """A handshake that times out (the server's greeting held back past it) is tried again
    with backoff by a call without a deadline, which succeeds once the server greets;
    before, the call failed with 'no courier handshake ... within 10 s'."""
    monkeypatch.setattr(tcp, 'HANDSHAKE_SECONDS', 0.3)
    with courier.Server(Echo(), secret=SECRET) as server, \
            _released_on_first_retry(held_greetings) as retried:
        client = courier.Client(server.address, transport='tcp', secret=SECRET)
        assert client.echo(7) == 7
        assert retried.is_set()


@pytest.mark.parametrize('path', ['sync', 'futures'])
def test_a_call_with_a_deadline_keeps_it_while_the_server_is_slow(held_greetings, monkeypatch,
                                                                  path):
    """With a deadline the timed-out handshake is the caller's error, not retried. The
    greeting is released before the server stops, which otherwise waited for its held door."""
    with courier.Server(Echo(), secret=SECRET) as server:
        client = courier.Client(server.address, transport='tcp', secret=SECRET, timeout=0.3)
        with pytest.raises(courier.CourierUnavailableError, match='no courier handshake'):
            if path == 'sync':
                client.echo(1)
            else:
                client.futures.echo(1).result(timeout=30)
        held_greetings.set()


def test_a_future_without_deadline_dials_again_too(held_greetings, monkeypatch):
    """``client.futures`` connects when called: its timed-out handshake is retried as well."""
    monkeypatch.setattr(tcp, 'HANDSHAKE_SECONDS', 0.3)
    with courier.Server(Echo(), secret=SECRET) as server, \
            _released_on_first_retry(held_greetings) as retried:
        client = courier.Client(server.address, transport='tcp', secret=SECRET)
        assert client.futures.echo(8).result(timeout=30) == 8
        assert retried.is_set()


def test_the_door_handshakes_while_an_admission_is_slow():
    """The door hands authenticated sockets to another thread: a connection whose admission
    is held (starting its reader thread on a loaded machine) does not hold back the next
    client's handshake (before, the second client timed out behind the first's admission)."""
    identity = auth.Identity.fresh(SECRET, 'door-test')
    listener = socket.create_server(('127.0.0.1', 0))
    port = listener.getsockname()[1]
    first_admitted, release = threading.Event(), threading.Event()
    admitted = []

    def admit(sock, peer):
        admitted.append(sock)
        if len(admitted) == 1:
            first_admitted.set()
            release.wait(30)

    gate = tcp_handshakes.Gate(listener, identity, 'door-test', admit, None, 10.0, 16)
    door = threading.Thread(target=gate.run)
    door.start()
    clients = []
    try:
        for _ in range(2):
            sock = socket.create_connection(('127.0.0.1', port), timeout=10)
            clients.append(sock)
            tcp_handshakes.client_handshake(sock, SECRET, f'127.0.0.1:{port}', timeout=2.0)
            assert first_admitted.wait(10)
    finally:
        release.set()
        gate.close()
        door.join(timeout=10)
        listener.close()
        for sock in clients + admitted:
            sock.close()
    assert not door.is_alive()


class _HeldProxy:
    """A TCP proxy to ``target`` that passes the server's bytes at once and the client's only
    once ``release`` is set: the server's gRPC sends its HTTP/2 settings, reads none back
    within its handshake timeout, and closes the connection ("Did not receive HTTP/2
    settings before handshake timeout"), as a server starved of CPU did in issue 25."""

    def __init__(self, target: str):
        host, _, port = target.rpartition(':')
        self._target = (host, int(port))
        self.release = threading.Event()
        self._listener = socket.create_server(('127.0.0.1', 0))
        self.address = f'127.0.0.1:{self._listener.getsockname()[1]}'
        self._sockets: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, name='test-proxy')]
        self._threads[0].start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # Closed: the test is over.
                return
            server = socket.create_connection(self._target, timeout=10)
            server.settimeout(None)
            self._sockets += [client, server]
            for pump in (threading.Thread(target=self._pump, args=(client, server, self.release)),
                         threading.Thread(target=self._pump, args=(server, client, None))):
                self._threads.append(pump)
                pump.start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket, gate: threading.Event | None) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if gate is not None:
                    gate.wait(30)
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.release.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # Wakes accept(); close() alone does not.
        self._listener.close()
        for sock in list(self._sockets):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for thread in list(self._threads):
            thread.join(timeout=10)


@contextlib.contextmanager
def _held_grpc_server(handshake_timeout: float = 0.3):
    """(A server whose gRPC handshakes time out while the proxy in front holds the client's
    bytes, that proxy.)"""
    with courier.Server(Echo(), secret=SECRET, handshake_timeout=handshake_timeout) as server:
        proxy = _HeldProxy(server.address)
        try:
            yield server, proxy
        finally:
            proxy.close()


@pytest.mark.parametrize('transport', ['grpc', 'tcp'])
@pytest.mark.parametrize('path', ['sync', 'futures'])
def test_a_call_without_deadline_asks_endpoints_again_after_a_grpc_handshake_timeout(
        loop, transport, path):  # noqa: F811
    """A first contact whose gRPC connection the server closed for want of HTTP/2 settings
    is made again with backoff by a call without a deadline, which succeeds once the proxy
    passes the client's bytes; before, the call failed with CourierUnavailableError
    ('Did not receive HTTP/2 settings before handshake timeout')."""
    with _held_grpc_server() as (_, proxy), \
            _released_on_first_retry(proxy.release) as retried:
        client = courier.Client(proxy.address, transport=transport, secret=SECRET)
        if path == 'sync':
            assert client.echo(9) == 9
        else:
            assert client.futures.echo(9).result(timeout=30) == 9
        assert retried.is_set()


@pytest.fixture
def first_endpoints_cancelled(monkeypatch):
    """Servers made from now on cancel the first ``Endpoints`` question they are asked (as a
    starved server did in a fan-in at 1,000 over ssh, 11:05 UTC) and answer the next."""
    answer = grpc_server.GrpcListener._handle_endpoints
    asked = []

    def cancelled_first(self, requests, context):
        asked.append(True)
        if len(asked) == 1:
            context.abort(grpc.StatusCode.CANCELLED, 'cancelled by the test')
        return answer(self, requests, context)

    monkeypatch.setattr(grpc_server.GrpcListener, '_handle_endpoints', cancelled_first)
    return asked


@pytest.mark.parametrize('transport', ['grpc', 'tcp'])
def test_a_call_without_deadline_asks_endpoints_again_after_the_server_cancelled_it(
        first_endpoints_cancelled, transport):
    """A first contact the server cancelled is made again by a call without a deadline;
    before, the call failed with CourierCancelledError ('cancelled calling Endpoints')."""
    with courier.Server(Echo(), secret=SECRET) as server, \
            _released_on_first_retry(threading.Event()) as retried:
        client = courier.Client(server.address, transport=transport, secret=SECRET)
        assert client.echo(4) == 4
        assert retried.is_set()
        assert len(first_endpoints_cancelled) == 2


def test_a_first_contact_with_a_deadline_fails_at_a_grpc_handshake_timeout():
    """A call with a deadline is not made again: the closed first contact is its error."""
    with _held_grpc_server() as (_, proxy):
        client = courier.Client(proxy.address, transport='grpc', secret=SECRET, timeout=20)
        with pytest.raises(courier.CourierUnavailableError, match='handshake timeout'):
            client.echo(1)


def test_a_first_contact_fails_at_once_while_a_fail_fast_rule_covers_its_server():
    """While its program stops (or its server left its group) the closed first contact is
    not made again: the call fails with the rule's reason."""
    with _held_grpc_server() as (_, proxy):
        end = courier.fail_fast_on_unavailable([proxy.address], why="node 'x/1' left its group")
        try:
            client = courier.Client(proxy.address, transport='grpc', secret=SECRET)
            with pytest.raises(courier.CourierUnavailableError, match='left its group'):
                client.echo(1)
        finally:
            end()
