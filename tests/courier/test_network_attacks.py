"""Bad input from the network: each case closes the connection, logs once, runs nothing.

Every attack carries a request whose unpickling would create a file (the
"bomb"), so a missing file proves nothing was unpickled; the served object
counts its calls, so zero proves no method ran; a legitimate client is
served afterwards, so the server survived.
"""

from __future__ import annotations

import logging
import os
import pickle
import secrets
import socket
import struct
import threading
import time

import grpc
import pytest

from launchpad_py import courier
from launchpad_py.courier import auth, frames, messages
from launchpad_py.courier.transports import grpc_tokens, tcp_handshakes
from attackers import Bomb as _Bomb, Target

SECRET = secrets.token_bytes(32)
HANDSHAKE_TIMEOUT = 0.5
LOGGER = 'launchpad_py.courier'


@pytest.fixture
def served(tmp_path):
    target = Target()
    server = courier.Server(target, secret=SECRET, handshake_timeout=HANDSHAKE_TIMEOUT).start()
    bomb = str(tmp_path / 'unpickled')
    try:
        yield server, target, bomb
    finally:
        server.stop()


def _bomb_frame(bomb: str) -> bytes:
    pickled = pickle.dumps(('mark', (_Bomb(bomb),), {}), protocol=5)
    return frames.HEADER.pack(1, 1, 0, 0, len(pickled), 0, 0) + pickled


def _tcp(server) -> socket.socket:
    sock = socket.create_connection(('127.0.0.1', server.tcp_port), timeout=10)
    sock.settimeout(10)
    return sock


def _closed_by_server(sock: socket.socket) -> bool:
    """True once the server closed the connection (reads EOF or a reset within 10 s)."""
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return True


def _read_hello(sock: socket.socket, secret: bytes) -> tuple[bytes, auth.Identity]:
    """The server nonce of a TCP greeting, and the identity (key) ``secret`` gives that server."""
    hello = tcp_handshakes.recv_exactly(sock, tcp_handshakes.SERVER_HELLO)
    name = tcp_handshakes.recv_exactly(sock, hello[-1]).decode()
    nonce = hello[len(tcp_handshakes.MAGIC):len(tcp_handshakes.MAGIC) + auth.NONCE_BYTES]
    incarnation = hello[len(tcp_handshakes.MAGIC) + auth.NONCE_BYTES:-1]
    return nonce, auth.Identity.of(secret, name, incarnation)


def _authenticate(sock: socket.socket) -> None:
    tcp_handshakes.client_handshake(sock, SECRET, 'test', 10)
    sock.settimeout(10)


def _assert_untouched(server, target: Target, bomb: str) -> None:
    assert not os.path.exists(bomb), 'the payload was unpickled'
    assert target.count == 0, 'a method ran'
    client = courier.Client(server.address, transport='tcp', secret=SECRET, timeout=10)
    assert client.mark() == 1  # Still serving its legitimate callers.


def _refusals(caplog, peer: tuple) -> list[logging.LogRecord]:
    where = f'{peer[0]}:{peer[1]}'
    return [r for r in caplog.records if r.name == LOGGER and where in r.getMessage()]


def _wait_for_log(caplog, peer: tuple) -> list[logging.LogRecord]:
    """The server's records about ``peer``; complete once it closed the connection.

    The server logs before it closes, and the connection's thread ends there.
    """
    return _refusals(caplog, peer)


def test_wrong_secret_is_refused_before_anything_is_read(served, caplog):
    """A client proving a wrong secret is cut off; its request is never decoded."""
    server, target, bomb = served
    sock = _tcp(server)
    server_nonce, wrong_key = _read_hello(sock, secrets.token_bytes(32))
    ours = os.urandom(auth.NONCE_BYTES)
    wrong = auth.mac(wrong_key.key, b'client', server_nonce, ours)
    sock.sendall(tcp_handshakes.MAGIC + ours + wrong + _bomb_frame(bomb))
    assert _closed_by_server(sock)
    assert len(_wait_for_log(caplog, sock.getsockname())) == 1
    sock.close()
    _assert_untouched(server, target, bomb)


def test_wrong_secret_raises_authentication_error_in_the_client(served):
    """courier.Client with a wrong secret raises AuthenticationError, by TCP and by gRPC."""
    server, target, _ = served
    for transport in ('tcp', 'grpc'):
        client = courier.Client(server.address, transport=transport, timeout=10,
                                secret=secrets.token_bytes(32))
        with pytest.raises(courier.AuthenticationError):
            client.mark()
    assert target.count == 0


def test_silent_connection_is_closed_after_the_handshake_timeout(served, caplog):
    """A peer that connects and says nothing is closed once the handshake time is up."""
    server, target, bomb = served
    sock = _tcp(server)
    started = time.monotonic()
    assert _closed_by_server(sock)
    assert time.monotonic() - started >= HANDSHAKE_TIMEOUT * 0.9
    records = _wait_for_log(caplog, sock.getsockname())
    assert len(records) == 1 and 'no handshake' in records[0].getMessage()
    sock.close()
    _assert_untouched(server, target, bomb)


def test_garbage_bytes_are_refused(served, caplog):
    """Random bytes instead of a handshake close the connection."""
    server, target, bomb = served
    sock = _tcp(server)
    sock.sendall(os.urandom(tcp_handshakes.CLIENT_PROOF) + _bomb_frame(bomb))
    assert _closed_by_server(sock)
    assert len(_wait_for_log(caplog, sock.getsockname())) == 1
    sock.close()
    _assert_untouched(server, target, bomb)


def _rss_bytes() -> int:
    with open('/proc/self/status') as status:
        line = next(l for l in status if l.startswith('VmRSS:'))
    return int(line.split()[1]) * 1024


@pytest.mark.parametrize('authenticated', [False, True])
def test_huge_frame_header_is_refused_before_allocation(served, caplog, authenticated):
    """A header claiming 100 GiB is refused without the memory ever being taken."""
    server, target, bomb = served
    pickled = pickle.dumps(('mark', (_Bomb(bomb),), {}), protocol=5)
    huge = (frames.HEADER.pack(1, 1, 0, 1, len(pickled), 0, 0)
            + struct.pack('<qQ', -1, 100 << 30) + pickled)
    before = _rss_bytes()
    sock = _tcp(server)
    if authenticated:
        _authenticate(sock)
    sock.sendall(huge)
    assert _closed_by_server(sock)
    assert len(_wait_for_log(caplog, sock.getsockname())) == 1
    assert _rss_bytes() - before < 64 << 20
    sock.close()
    _assert_untouched(server, target, bomb)


def test_a_clean_hang_up_is_not_logged(served, caplog):
    """A caller that leaves between frames is no incident: nothing is logged."""
    server, _, _ = served
    sock = _tcp(server)
    _authenticate(sock)
    sock.shutdown(socket.SHUT_WR)
    assert _closed_by_server(sock)
    assert _wait_for_log(caplog, sock.getsockname()) == []
    sock.close()


def test_truncated_handshake_is_refused(served, caplog):
    """Half a handshake, then the peer hangs up: closed, logged, nothing read further."""
    server, target, bomb = served
    sock = _tcp(server)
    tcp_handshakes.recv_exactly(sock, tcp_handshakes.SERVER_HELLO)
    sock.sendall(tcp_handshakes.MAGIC + os.urandom(10))
    sock.shutdown(socket.SHUT_WR)
    assert _closed_by_server(sock)
    assert len(_wait_for_log(caplog, sock.getsockname())) == 1
    sock.close()
    _assert_untouched(server, target, bomb)


def test_truncated_frame_runs_nothing(served, caplog):
    """An authenticated peer that sends half a request frame and leaves runs nothing."""
    server, target, bomb = served
    sock = _tcp(server)
    _authenticate(sock)
    frame = _bomb_frame(bomb)
    sock.sendall(frame[:len(frame) // 2])
    sock.shutdown(socket.SHUT_WR)
    assert _closed_by_server(sock)
    records = _wait_for_log(caplog, sock.getsockname())
    assert len(records) == 1 and 'middle of a frame' in records[0].getMessage()
    sock.close()
    _assert_untouched(server, target, bomb)


def test_flood_of_silent_connections_leaves_the_server_serving(served):
    """1,000 connections that never authenticate: a legitimate client is still served."""
    server, target, bomb = served
    flood = [socket.create_connection(('127.0.0.1', server.tcp_port), timeout=10)
             for _ in range(1000)]
    try:
        client = courier.Client(server.address, transport='tcp', secret=SECRET, timeout=10)
        assert client.mark() == 1
        for sock in flood:
            sock.settimeout(10)
            assert _closed_by_server(sock)
    finally:
        for sock in flood:
            sock.close()
    assert not os.path.exists(bomb)
    assert target.count == 1


def test_replayed_handshake_is_refused(served, caplog):
    """A recorded client proof is useless on a new connection: the server's nonce changed."""
    server, target, bomb = served
    sock = _tcp(server)
    server_nonce, identity = _read_hello(sock, SECRET)
    ours = os.urandom(auth.NONCE_BYTES)
    recorded = tcp_handshakes.MAGIC + ours + auth.mac(identity.key, b'client', server_nonce, ours)
    sock.sendall(recorded)
    answer = tcp_handshakes.recv_exactly(sock, tcp_handshakes.SERVER_PROOF)
    assert len(answer) == tcp_handshakes.SERVER_PROOF  # Accepted.
    sock.close()
    replay = _tcp(server)
    _read_hello(replay, SECRET)
    replay.sendall(recorded + _bomb_frame(bomb))
    assert _closed_by_server(replay)
    records = _wait_for_log(caplog, replay.getsockname())
    assert len(records) == 1 and 'wrong secret' in records[0].getMessage()
    replay.close()
    _assert_untouched(server, target, bomb)


@pytest.fixture
def grpc_request(served):
    server, target, bomb = served
    parts, _ = frames.encode(0, frames.REQUEST, ('mark', (_Bomb(bomb),), {}))
    request = b''.join(parts)
    channel = grpc.insecure_channel(server.address)
    try:
        yield channel, request
    finally:
        channel.close()


def _grpc_identity(channel: grpc.Channel, address: str, secret: bytes) -> auth.Identity:
    """The identity the server at ``address`` proves, with the key ``secret`` gives it."""
    nonce, metadata = grpc_tokens.hello_request()
    reply = channel.unary_unary(messages.ENDPOINTS)(b'', metadata=metadata, timeout=10)
    identity, _ = grpc_tokens.check_hello_reply(SECRET, nonce, reply, address, None)
    return auth.Identity.of(secret, identity.name, identity.incarnation)


def _token(channel, server, secret: bytes, body: bytes) -> tuple:
    identity = _grpc_identity(channel, server.address, secret)
    return grpc_tokens.grpc_token(identity, messages.CALL, grpc_tokens.digest((body,)))[0]


@pytest.mark.parametrize('token', ['none', 'wrong', 'malformed'])
def test_grpc_call_without_a_valid_token_is_refused(served, grpc_request, caplog, token):
    """A gRPC call with no token, a wrong one or garbage is refused with UNAUTHENTICATED."""
    server, target, bomb = served
    channel, request = grpc_request
    call = channel.unary_unary(messages.CALL)
    metadata = {'none': (), 'malformed': ((grpc_tokens.METADATA_KEY, 'x/y'),),
                'wrong': _token(channel, server, secrets.token_bytes(32), request)}[token]
    with pytest.raises(grpc.RpcError) as caught:
        call(request, metadata=metadata, timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert len([r for r in caplog.records if 'refused a gRPC call' in r.getMessage()]) == 1
    _assert_untouched(server, target, bomb)


def test_replayed_grpc_token_is_refused(served, grpc_request):
    """A valid token works once; the same token again is refused."""
    server, target, bomb = served
    channel, _ = grpc_request
    call = channel.unary_unary(messages.CALL)
    harmless = b''.join(frames.encode(0, frames.REQUEST, ('mark', (), {}))[0])
    token = _token(channel, server, SECRET, harmless)
    call(harmless, metadata=token, timeout=10)
    with pytest.raises(grpc.RpcError) as caught:
        call(harmless, metadata=token, timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert not os.path.exists(bomb)
    assert target.count == 1


def test_endpoints_answers_only_with_a_proof_of_the_server(served):
    """``Endpoints`` needs a nonce, and its answer proves the server only to holders of the secret."""
    server, _, _ = served
    channel = grpc.insecure_channel(server.address)
    try:
        with pytest.raises(grpc.RpcError) as caught:
            channel.unary_unary(messages.ENDPOINTS)(b'', timeout=10)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        nonce, metadata = grpc_tokens.hello_request()
        reply = channel.unary_unary(messages.ENDPOINTS)(b'', metadata=metadata, timeout=10)
    finally:
        channel.close()
    _, port = grpc_tokens.check_hello_reply(SECRET, nonce, reply, server.address, None)
    assert port == server.tcp_port
    with pytest.raises(courier.AuthenticationError):
        grpc_tokens.check_hello_reply(secrets.token_bytes(32), nonce, reply, server.address, None)


def test_server_stays_up_under_concurrent_attacks(served):
    """Attackers and a legitimate client at once: the client's calls all succeed."""
    server, target, bomb = served
    stop = threading.Event()

    def attack():
        while not stop.is_set():
            try:
                with socket.create_connection(('127.0.0.1', server.tcp_port), timeout=5) as s:
                    s.sendall(os.urandom(200))
                    s.settimeout(5)
                    _closed_by_server(s)
            except OSError:
                pass

    attackers = [threading.Thread(target=attack) for _ in range(4)]
    for thread in attackers:
        thread.start()
    try:
        client = courier.Client(server.address, transport='tcp', secret=SECRET, timeout=10)
        assert [client.mark() for _ in range(50)] == list(range(1, 51))
    finally:
        stop.set()
        for thread in attackers:
            thread.join(timeout=30)
    assert not os.path.exists(bomb)


class FalseServer:
    """What an impostor on a node's port would serve: replies that run code when decoded."""

    def __init__(self, bomb: str):
        self.bomb = bomb

    def mark(self, *args):
        return _Bomb(self.bomb)


@pytest.mark.parametrize('transport', ['tcp', 'grpc'])
def test_a_reply_from_a_server_without_the_secret_is_not_decoded(tmp_path, transport):
    """A client refuses the reply of a server that cannot prove the secret, before unpickling it."""
    bomb = str(tmp_path / 'unpickled-by-client')
    with courier.Server(FalseServer(bomb)) as impostor:
        client = courier.Client(impostor.address, transport=transport, secret=SECRET, timeout=10)
        with pytest.raises(courier.AuthenticationError):
            client.mark()
        with pytest.raises(courier.AuthenticationError):
            client.futures.mark().result(timeout=10)
    assert not os.path.exists(bomb)


OUT_OF_DESCRIPTORS_SERVER = '''
import os, resource, sys
from launchpad_py import courier
from test_network_attacks import Target
server = courier.Server(Target(), secret=bytes.fromhex(sys.argv[1])).start()
open_now = len(os.listdir('/proc/self/fd'))
resource.setrlimit(resource.RLIMIT_NOFILE, (open_now + 24, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
print(server.address, server.tcp_port, flush=True)
sys.stdin.read()
server.stop()
'''


def _server_process(script: str):
    """Runs ``script`` (one of the servers above) in a fresh interpreter: lines in and out."""
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    return subprocess.Popen(
        [sys.executable, '-c', script, SECRET.hex()], cwd=here,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, 'PYTHONPATH': os.pathsep.join(
            [here, os.path.dirname(here), os.path.dirname(os.path.dirname(here))])})


def test_a_server_out_of_descriptors_drops_strangers_for_callers(tmp_path):
    """When silent connections use up the server's descriptors, a new caller is still served."""
    server = _server_process(OUT_OF_DESCRIPTORS_SERVER)
    flood = []
    try:
        address, tcp_port = server.stdout.readline().split()
        flood = [socket.create_connection(('127.0.0.1', int(tcp_port)), timeout=10)
                 for _ in range(60)]
        client = courier.Client(address, transport='tcp', secret=SECRET, timeout=20)
        assert client.mark() == 1
    finally:
        for sock in flood:
            sock.close()
        server.stdin.close()
        server.wait(timeout=30)


# As above, but gRPC's start waits for the test: it connects strangers at the raw-TCP port
# just after the reserve was freed, then lets the start go on.
GRPC_START_RACE_SERVER = '''
import os, resource, sys, threading
import grpc
from launchpad_py import courier
from test_network_attacks import Target
real_server, go = grpc.server, threading.Event()
def held_start(*args, **kwargs):
    print('starting', flush=True)
    go.wait()
    return real_server(*args, **kwargs)
grpc.server = held_start
server = courier.Server(Target(), secret=bytes.fromhex(sys.argv[1]),
                        handshake_timeout=2.0).start()
open_now = len(os.listdir('/proc/self/fd'))
resource.setrlimit(resource.RLIMIT_NOFILE, (open_now + 24, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
print(server.address, server.tcp_port, flush=True)
for line in sys.stdin:  # 'go': the start goes on; the end of input: stop.
    go.set()
server.stop()
'''


def test_strangers_arriving_while_grpc_starts_do_not_take_its_descriptors(tmp_path):
    """gRPC's core starts on descriptors kept for it; strangers connecting at that moment
    wait at the raw-TCP port instead of taking them, and the server serves once they leave."""
    import select
    server = _server_process(GRPC_START_RACE_SERVER)
    flood = []
    try:
        address, tcp_port = server.stdout.readline().split()
        strangers = lambda count: [socket.create_connection(('127.0.0.1', int(tcp_port)),
                                                            timeout=10) for _ in range(count)]
        flood += strangers(60)  # More than the server has descriptors for.
        flood.append(socket.create_connection(
            ('127.0.0.1', int(address.rsplit(':', 1)[1])), timeout=10))  # gRPC starts.
        assert server.stdout.readline() == 'starting\n'
        during_start = strangers(40)
        flood += during_start
        # The raw-TCP gate greets whom it accepts: while gRPC starts, it accepts nobody.
        assert select.select(during_start, [], [], 1.0)[0] == []
        server.stdin.write('go\n')
        server.stdin.flush()
        for sock in flood:
            sock.close()
        flood = []
        client = courier.Client(address, transport='tcp', secret=SECRET, timeout=20)
        assert client.mark() == 1
        assert server.poll() is None
    finally:
        for sock in flood:
            sock.close()
        if server.poll() is None:
            server.stdin.write('go\n')  # Also when the test failed before it let gRPC start.
        server.stdin.close()
        server.wait(timeout=30)


HTTP2_PREFACE = b'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n' + b'\x00\x00\x00\x04\x00\x00\x00\x00\x00'


def test_grpc_port_closes_idle_unauthenticated_connections(tmp_path):
    """300 strangers on the gRPC port (half silent, half past HTTP/2's preface but calling
    nothing) are all closed within the handshake and idle limits; callers are served."""
    target = Target()
    with courier.Server(target, secret=SECRET, handshake_timeout=HANDSHAKE_TIMEOUT,
                        idle_timeout=1.0) as server:
        port = server.port
        strangers = [socket.create_connection(('127.0.0.1', port), timeout=10)
                     for _ in range(300)]
        try:
            for sock in strangers[150:]:
                sock.sendall(HTTP2_PREFACE)
            client = courier.Client(server.address, transport='grpc', secret=SECRET, timeout=10)
            assert client.mark() == 1
            started = time.monotonic()
            for sock in strangers:
                sock.settimeout(10)
                assert _closed_by_server(sock)
            assert time.monotonic() - started < 10
        finally:
            for sock in strangers:
                sock.close()
