"""Courier between network-namespace hosts: a server on lp-h1, clients on lp-h2.

The namespaces have their own network stacks, so ``127.0.0.1`` of one is not
the other's: what works here works between machines. They are made by
``shared/infra/ssh_hosts.sh up`` (``.ci/run`` does it when root).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys

import pytest

from conftest import REPO

SERVER_NS, CLIENT_NS = 'lp-h1', 'lp-h2'
SERVER_IP = '10.250.0.11'
SCRIPT = os.path.join(REPO, 'tests', 'scripts', 'netns_peer.py')


def _namespaces() -> set[str]:
    if os.geteuid() != 0 or not shutil.which('ip'):
        return set()
    listed = subprocess.run(['ip', 'netns', 'list'], capture_output=True, text=True)
    return {line.split()[0] for line in listed.stdout.splitlines() if line.strip()}


pytestmark = pytest.mark.skipif(
    not {SERVER_NS, CLIENT_NS} <= _namespaces(),
    reason='needs root and the network-namespace hosts lp-h1/lp-h2 '
           '(run `bash ../shared/infra/ssh_hosts.sh up` as root, as .ci/run does)')


def _in(namespace: str, *args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(['ip', 'netns', 'exec', namespace, sys.executable, SCRIPT, *args],
                            cwd=REPO, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            **kwargs)


@pytest.fixture(scope='module')
def remote_server():
    """A secret-protected server on lp-h1's interface; yields (address, secret)."""
    secret = secrets.token_bytes(32)
    server = _in(SERVER_NS, 'serve', SERVER_IP)
    try:
        server.stdin.write(secret.hex() + '\n')
        server.stdin.flush()
        line = server.stdout.readline().split()
        assert line[:1] == ['READY'], f'the server did not start: {line}'
        yield line[1], secret
    finally:
        server.stdin.close()
        server.wait(timeout=30)


def _call_from_client_host(address: str, secret: bytes | None, *options: str) -> dict:
    client = _in(CLIENT_NS, 'call', address, *options)
    out, _ = client.communicate((secret.hex() if secret else '') + '\n', timeout=120)
    assert client.returncode == 0
    return json.loads(out.strip().splitlines()[-1])


def test_server_address_names_its_interface(remote_server):
    """The address a remote server reports is its interface address, not loopback."""
    address, _ = remote_server
    assert address.startswith(f'{SERVER_IP}:')


def test_calls_between_hosts_work_by_tcp_grpc_and_auto(remote_server):
    """From another host, sync calls, 8 futures and a 1 MiB array work on every transport."""
    address, secret = remote_server
    report = _call_from_client_host(address, secret)
    for transport in ('tcp', 'grpc', 'auto'):
        seen = report[transport]
        assert 'error' not in seen, seen
        assert seen['tiny'] == 7 and seen['futures'] == list(range(8)) and seen['array_ok']


def test_calls_between_hosts_without_the_secret_are_refused(remote_server):
    """From another host without the secret, every transport raises AuthenticationError."""
    address, secret = remote_server
    before = _call_from_client_host(address, secret)['auto']['calls']
    report = _call_from_client_host(address, None)
    for transport in ('tcp', 'grpc', 'auto'):
        assert report[transport]['error'] == 'AuthenticationError', report[transport]
    after = _call_from_client_host(address, secret)['tcp']['calls']
    assert after == before + 10  # Only the second authenticated round ran methods.


def test_loopback_of_the_server_host_is_not_reachable_from_another(remote_server):
    """127.0.0.1:port from lp-h2 is lp-h2's own loopback: nothing listens there."""
    address, secret = remote_server
    port = address.rpartition(':')[2]
    report = _call_from_client_host(f'127.0.0.1:{port}', secret, 'nowait')
    assert report['tcp']['error'] == 'CourierUnavailableError'
