"""A loopback server starts gRPC only when someone dials its port, behind a relay.

gRPC's core, once started in a process, keeps six threads that wake about seven times a
second; a local node's peers use the Unix socket, so a loopback server holds its port with
a plain socket and starts gRPC (on an abstract Unix socket, relayed) at the first
connection (``courier/transports/sockets/relay.py``).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

import pytest

from launchpad_py import courier
from launchpad_py.courier.transports.sockets import relay
from courier_test_nodes import Echo

_HERE = os.path.dirname(os.path.abspath(__file__))

# In a process of its own: gRPC's core, once started, stays for the process's life.
_GRPC_THREADS = '''
import os, sys
from launchpad_py import courier
from courier_test_nodes import Echo

def grpc_threads():
    names = [open(f'/proc/self/task/{t}/comm').read().strip() for t in os.listdir('/proc/self/task')]
    return sorted(n for n in names if n.startswith(('grpc', 'event_engine', 'lifeguard')))

with courier.Server(Echo(), label='deferred') as server:
    assert courier.Client(server.address).echo(1) == 1  # The Unix socket.
    print('unix', grpc_threads(), flush=True)
    assert courier.Client(server.address, transport='grpc').echo(2) == 2
    print('grpc', grpc_threads(), flush=True)
'''


def _run(script: str) -> list[str]:
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join(
        [_HERE, os.path.dirname(_HERE), os.path.dirname(os.path.dirname(_HERE))])}
    done = subprocess.run([sys.executable, '-c', script], cwd=_HERE, env=env, text=True,
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_a_loopback_server_called_over_the_unix_socket_starts_no_grpc():
    """Called over the Unix socket only, a loopback server has started none of gRPC's
    threads; the first gRPC call is answered and starts them."""
    unix, grpc_line = _run(_GRPC_THREADS)
    assert unix == 'unix []'
    assert 'grpc_global_tim' in grpc_line and 'event_engine' in grpc_line


def test_only_loopback_addresses_defer_grpc():
    """Loopback literals defer gRPC; other addresses and names bind gRPC at once."""
    assert relay.applies('127.0.0.1') and relay.applies('127.0.0.5') and relay.applies('[::1]')
    assert not relay.applies('10.250.0.11')
    assert not relay.applies('0.0.0.0')
    assert not relay.applies('localhost')


def test_a_dialled_server_frees_its_port_for_a_restart():
    """After a server answered over gRPC (through the relay) and stopped, a new server binds
    the same port at once and answers there."""
    first = courier.Server(Echo(), label='first').start()
    port = first.port
    assert courier.Client(first.address, transport='grpc').echo('a') == 'a'
    first.stop()
    second = courier.Server(Echo(), port=port, label='second').start()
    try:
        assert second.port == port
        assert courier.Client(second.address, transport='grpc').echo('b') == 'b'
    finally:
        second.stop()


def _relay_threads(label: str) -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == f'courier-{label}-grpc']


def test_strangers_that_hang_up_or_half_close_leave_callers_served():
    """Connections that close at once, send garbage, or close their sending side only,
    leave the relay serving the next caller; stop ends the relay's thread."""
    server = courier.Server(Echo(), label='strangers').start()
    try:
        assert courier.Client(server.address, transport='grpc').echo(0) == 0
        for kind in ('close', 'garbage', 'half'):
            stranger = socket.create_connection(('127.0.0.1', server.port), timeout=10)
            if kind == 'garbage':
                stranger.sendall(b'GET / HTTP/1.1\r\n\r\n' * 100)
            if kind == 'half':
                stranger.shutdown(socket.SHUT_WR)
                stranger.settimeout(10)
                assert stranger.recv(1 << 16) is not None  # gRPC answers or closes; no hang.
            stranger.close()
            assert courier.Client(server.address, transport='grpc').echo(kind) == kind
        assert _relay_threads('strangers')
    finally:
        server.stop()
    assert _relay_threads('strangers') == []


def test_a_large_message_crosses_the_relay_both_ways():
    """A reply larger than the relay's chunk and the sockets' buffers comes back whole."""
    payload = os.urandom(8 << 20)
    with courier.Server(Echo(), label='large') as server:
        assert courier.Client(server.address, transport='grpc').echo(payload) == payload


@pytest.mark.parametrize('transport', ['grpc', 'tcp'])
def test_many_callers_at_once_through_the_relay(transport):
    """Sixteen clients calling at once over gRPC (or raw TCP, which asks gRPC for its port)
    are all answered."""
    with courier.Server(Echo(), label='many') as server:
        results = [None] * 16

        def call(i):
            results[i] = courier.Client(server.address, transport=transport).echo(i)

        threads = [threading.Thread(target=call, args=(i,)) for i in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert results == list(range(16))
