"""Proofs are bound to the server they are for: no relay, no replay across the nodes of a program.

The attacker (``attackers.py``) never holds the program secret: it sees the
proofs a caller sends to wherever it dialed, and tries to spend them at
another node of the same program. Each attack ends, if it works, with the
attacker's pickle decoded in a node (a file appears); every test asserts
that file is absent and the node it aimed at ran no call.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys

import pytest

import launchpad_py as lp
from launchpad_py import courier
from launchpad_py.courier import auth, messages
from attackers import GrpcRelay, Target, TcpRelay, bomb_frame, bomb_path, bomb_request, spend
from conftest import launch, needs_slurm, needs_ssh_hosts, wait_for

# One launcher per family for the relay attacks: threads, local processes, and the remote
# core (ssh; slurm starts its nodes through the same core, the proofs are the courier's).
# Attack 4, which leans on how a killed node comes back, runs under ssh and slurm.
LAUNCH_TYPES = ['local_mt', 'local_mp', pytest.param('ssh', marks=needs_ssh_hosts)]
TRANSPORTS = ['grpc', 'tls']


@pytest.fixture(scope='module')
def credentials():
    return courier.TlsCredentials.generate()


class Launched:
    """Nodes 'a' and 'b' of one program (one secret), serving ``Target``."""

    def __init__(self, controller, a, b, tls):
        self.controller, self.a, self.b, self.tls = controller, a, b, tls

    def caller_of_a(self, dialed: str, transport: str) -> courier.Client:
        """A legitimate caller of node 'a' that dials ``dialed`` (where the attacker sits)."""
        address = self.a.address.resolve()
        return courier.Client(dialed, secret=auth.secret_for(address), transport=transport,
                              server_identity=self.a.address.identity, tls=self.tls,
                              timeout=10, wait_for_ready=False)

    def calls_at_b(self) -> int:
        return self.b.dereference().calls()


def _program(tls, transport: str = 'auto') -> tuple[lp.Program, object, object]:
    program = lp.Program('proofs')
    options = {} if tls is None else {'courier_kwargs': {'tls': tls},
                                      'courier_client_kwargs': {'tls': tls}}
    a = program.add_node(lp.CourierNode(Target, **options), label='a')
    b = program.add_node(lp.CourierNode(Target, **options), label='b')
    return program, a, b


@pytest.fixture(scope='module', params=LAUNCH_TYPES)
def shared_programs(request, credentials):
    """The launch type, and for launchers of processes its two programs (plain and TLS),
    started once here, before any test's leak check, for attacks 1-3: two launches per
    launcher, not six. A failed attack changes nothing in the nodes, and each test asserts
    for itself that b ran no call and that a counted only the calls it made. Under local_mt
    the nodes are threads of this process whose connection threads a test's calls start,
    so each test launches its own (in ``launched``); those launches take milliseconds."""
    running = {}
    try:
        if request.param != 'local_mt':
            for tls in (None, credentials):
                program, a, b = _program(tls)
                running[tls is not None] = Launched(launch(program, request.param), a, b, tls)
        yield request.param, running
    finally:
        for program in running.values():
            program.controller.stop()


@pytest.fixture
def launched(shared_programs, credentials):
    """Yields a function ``launched(transport)``: the two-node program, with TLS for 'tls'."""
    launch_type, running = shared_programs
    controllers = []

    def start(transport: str) -> Launched:
        if running:
            return running[transport == 'tls']
        tls = credentials if transport == 'tls' else None
        program, a, b = _program(tls)
        controller = launch(program, launch_type)
        controllers.append(controller)
        return Launched(controller, a, b, tls)

    yield start
    for controller in controllers:
        controller.stop()


def _untouched(bomb: str, program: Launched) -> None:
    assert not os.path.exists(bomb), "the attacker's pickle was decoded in a node"
    assert program.calls_at_b() == 0, 'a call reached node b'


@pytest.mark.parametrize('transport', TRANSPORTS)
def test_a_token_used_at_one_node_is_refused_at_another(launched, transport, tmp_path):
    """Attack 1: a gRPC token seen on its way to node a (and used there) is spent at node b,
    with its own body and with the attacker's: b refuses both, decoding nothing."""
    program = launched(transport)
    bomb = bomb_path(tmp_path)
    marked = program.a.dereference().calls()
    with GrpcRelay(program.a.address.resolve(), tls=program.tls) as relay:
        assert program.caller_of_a(relay.address, 'grpc').mark() == marked + 1  # Passed on to a.
        (metadata, body), = relay.calls_seen()
    target = program.b.address.resolve()
    assert not spend(target, metadata, bomb_request(bomb), program.tls)
    assert not spend(target, metadata, body, program.tls)
    _untouched(bomb, program)


@pytest.mark.parametrize('transport', TRANSPORTS)
def test_a_false_server_collects_no_token_it_can_spend(launched, transport, tmp_path):
    """Attack 2: a false server where the caller dials (a dead node's port) answers the
    caller's questions from node b; the caller sends it nothing spendable."""
    program = launched(transport)
    bomb = bomb_path(tmp_path)
    with GrpcRelay(program.b.address.resolve(), tls=program.tls, only=(messages.ENDPOINTS,)) as fake:
        with pytest.raises(courier.CourierError):
            program.caller_of_a(fake.address, 'grpc').mark()
        harvested = fake.calls_seen()
    for metadata, _ in harvested:
        assert not spend(program.b.address.resolve(), metadata, bomb_request(bomb), program.tls)
    assert harvested == [], 'the caller sent a call to a server that is not node a'
    _untouched(bomb, program)


@pytest.mark.parametrize('transport', ['tcp', 'tls'])
def test_a_raw_tcp_handshake_cannot_be_relayed_to_another_node(launched, transport, tmp_path):
    """Attack 3: a false server points the caller's raw-TCP connection at its own relay to
    node b (rewriting the port in the Endpoints answer); the caller refuses it, so the
    attacker never holds a connection b has authenticated."""
    program = launched(transport)
    bomb = bomb_path(tmp_path)
    b_address = program.b.address.resolve()
    b_tcp = auth_port(b_address, program.tls)
    relay = TcpRelay((b_address.rpartition(':')[0], b_tcp), bomb_frame(bomb), program.tls)
    ours = struct.pack('<H', b_tcp), struct.pack('<H', relay.port)
    try:
        with GrpcRelay(b_address, tls=program.tls, only=(messages.ENDPOINTS,),
                       answer=lambda method, reply: reply.replace(*ours)) as fake:
            with pytest.raises(courier.CourierError):
                program.caller_of_a(fake.address, 'tcp').mark()
    finally:
        relay.close()
    assert not relay.relayed.is_set(), "the caller's proof reached node b"
    _untouched(bomb, program)


def auth_port(address: str, tls) -> int:
    """The raw-TCP port of the server at ``address``, asked as its legitimate callers do."""
    from launchpad_py.courier.transports import grpc_client
    caller = grpc_client.GrpcCaller(address, 10, True, 1 << 20, auth.secret_for(address), tls)
    return caller.tcp_port()


def _is_free(port: int) -> bool:
    """Whether a listener could bind 127.0.0.1:``port`` now, as the attacker polls for it.

    The node's pid turns zombie while its other threads still hold its sockets, so the
    port, not the process, is what to wait for.
    """
    probe = socket.socket()
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        probe.bind(('127.0.0.1', port))
        return True
    except OSError:
        return False
    finally:
        probe.close()


def _caller_after_kill(a, transport: str, tls, local: bool) -> courier.Client:
    """A new caller of node a: ``grpc`` (on one host: ``auto``, which falls back from the
    Unix socket to gRPC), ``tcp``, or ``tls`` (gRPC under the program's TLS credentials)."""
    chosen = {'grpc': 'auto' if local else 'grpc', 'tcp': 'tcp', 'tls': 'grpc'}[transport]
    return courier.Client(a.address.resolve(), transport=chosen, tls=tls, timeout=10,
                          server_identity=a.address.identity, wait_for_ready=False)


def _nothing_harvested(seen: list, b_address: str, bomb: str, tls) -> None:
    """The false server saw the caller (Endpoints) and no call; nothing it saw runs at b."""
    assert messages.ENDPOINTS in [method for method, _, _ in seen]  # The caller reached it.
    harvested = [(metadata, body) for method, metadata, body in seen
                 if method != messages.ENDPOINTS]
    for metadata, _ in harvested:
        assert not spend(b_address, metadata, bomb_request(bomb), tls)
    assert harvested == [], 'the caller sent a call to a server that is not node a'
    assert not os.path.exists(bomb)


@pytest.mark.parametrize('transport', ['grpc', 'tcp', 'tls'])
def test_a_false_server_on_a_killed_nodes_port_runs_nothing(transport, tmp_path, credentials):
    """Attack 4, end to end under local_mp: node a (lp.Restart) is SIGKILLed, the attacker
    binds its freed port at once and answers from node b; a's next caller falls back from
    the Unix socket to gRPC and reaches the attacker, which gets nothing to spend at b."""
    tls = credentials if transport == 'tls' else None
    program, a, b = _program(tls)
    bomb = bomb_path(tmp_path)
    policy = {'a': lp.Restart(max_restarts=1, backoff=(600.0, 600.0))}  # Back after the test.
    with lp.launch(program, launch_type='local_mp', failure_policy=policy) as controller:
        caller = a.dereference()
        assert caller.mark() == 1  # Over the Unix socket.
        pid = next(s.pid for s in controller.statuses() if s.label == 'a')
        os.kill(pid, signal.SIGKILL)
        port = int(a.address.resolve().rpartition(':')[2])
        wait_for(lambda: _is_free(port), timeout=30, what=f'port {port} of killed node a to be free')
        b_address = b.address.resolve()
        with GrpcRelay(b_address, port=port, tls=tls, only=(messages.ENDPOINTS,)) as fake:
            with pytest.raises(courier.AuthenticationError, match="not 'a/0'"):
                _caller_after_kill(a, transport, tls, local=True).mark()
            seen = fake.seen
        _nothing_harvested(seen, b_address, bomb, tls)
        assert b.dereference().calls() == 0


def _attacker_on_host_of(status, address: str, target: str) -> subprocess.Popen:
    """The false server of ``attackers.py``, started on the host of the node ``status``
    (inside that host's network namespace) as user nobody, for ``address``'s port.

    It keeps one capability, CAP_DAC_READ_SEARCH, only so that it can load this
    test's interpreter from under /root (0700 here); it reads nothing of the program.
    """
    host, _, port = address.rpartition(':')
    tests = os.path.dirname(os.path.abspath(__file__))
    # The hosts h1..h3 (and the share-nothing p1..p3) are the namespaces lp-h1..lp-h3.
    command = ['ip', 'netns', 'exec', f'lp-h{status.host[1:]}', 'setpriv', '--reuid=nobody',
               '--regid=nogroup', '--clear-groups', '--inh-caps=+dac_read_search',
               '--ambient-caps=+dac_read_search', 'env', 'HOME=/tmp', 'GRPC_VERBOSITY=NONE',
               f'PYTHONPATH={os.path.dirname(tests)}:{tests}', sys.executable,
               os.path.join(tests, 'attackers.py'), 'false-server', host, port, target]
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


@pytest.mark.parametrize('transport', ['grpc', 'tcp', 'tls'])
@pytest.mark.parametrize('launch_type', [pytest.param('ssh', marks=needs_ssh_hosts),
                                         pytest.param('slurm', marks=needs_slurm)])
def test_another_user_on_a_killed_nodes_host_runs_nothing(launch_type, transport, tmp_path,
                                                          credentials):
    """Attack 4 across hosts: node a (lp.Restart) is SIGKILLed on its host; user nobody on
    that host binds a's freed address and answers from node b; a's next caller reaches it
    (it answers Endpoints) and sends it nothing spendable, and b runs no call."""
    tls = credentials if transport == 'tls' else None
    program, a, b = _program(tls)
    bomb = bomb_path(tmp_path)
    policy = {'a': lp.Restart(max_restarts=1, backoff=(600.0, 600.0))}  # Back after the test.
    with launch(program, launch_type, failure_policy=policy) as controller:
        assert a.dereference().mark() == 1
        status = next(s for s in controller.statuses() if s.label == 'a')
        address, b_address = a.address.resolve(), b.address.resolve()
        os.kill(status.pid, signal.SIGKILL)
        attacker = _attacker_on_host_of(status, address, b_address)
        try:
            attacker.stdin.write('' if tls is None else
                                 f'{tls.certificate.hex()} {tls.private_key.hex()}')
            attacker.stdin.write('\n')
            attacker.stdin.flush()
            assert attacker.stdout.readline() == 'ready as uid 65534\n'  # Bound a's port.
            with pytest.raises(courier.AuthenticationError, match="not 'a/0'"):
                _caller_after_kill(a, transport, tls, local=False).mark()
        finally:
            attacker.stdin.close()
            seen = [json.loads(line) for line in attacker.stdout]
            attacker.wait(timeout=30)
        _nothing_harvested([(m, tuple(map(tuple, md)), bytes.fromhex(body))
                            for m, md, body in seen], b_address, bomb, tls)
        assert b.dereference().calls() == 0


SECRET = bytes(range(32))


def test_a_restarted_server_refuses_tokens_of_its_earlier_incarnation():
    """A token accepted before a restart is refused after it (the nonce list starts empty, the
    incarnation does not); a caller that held the old identity asks again and goes through."""
    first = courier.Server(Target(), secret=SECRET, identity='a/0').start()
    port = first.port
    caller = courier.Client(first.address, transport='grpc', secret=SECRET,
                            server_identity='a/0', timeout=10)
    assert caller.mark() == 1
    relay = GrpcRelay(first.address)
    try:
        seen = courier.Client(relay.address, transport='grpc', secret=SECRET, timeout=10)
        assert seen.mark() == 2
        (metadata, body), = relay.calls_seen()
    finally:
        relay.close()
        first.stop()
    with courier.Server(Target(), port, secret=SECRET, identity='a/0') as restarted:
        assert not spend(restarted.address, metadata, body)
        assert caller.mark() == 1 and caller.futures.mark().result(timeout=10) == 2


def test_a_tcp_caller_refuses_a_server_of_another_name_before_proving_anything():
    """Dialing node a's raw-TCP port and finding node b, the caller sends no proof at all."""
    from launchpad_py.courier.transports import tcp
    with courier.Server(Target(), secret=SECRET, identity='b/0') as other:
        bomb_free = TcpRelay(('127.0.0.1', other.tcp_port), b'')
        try:
            with pytest.raises(courier.AuthenticationError, match="not 'a/0'"):
                tcp.connect('127.0.0.1', bomb_free.port, SECRET, 'a:0', 10, expected='a/0')
        finally:
            bomb_free.close()
        assert not bomb_free.relayed.is_set()
