"""Launched programs accept calls only from holders of their secret.

"Outside the program" is a fresh interpreter with a plain ``courier.Client``:
it must be refused by gRPC and by raw TCP, and the method must not run. The
launching process itself holds the secret and can call its nodes.
"""

from __future__ import annotations

import os
import socket

import psutil
import pytest

import launchpad_py as lp
from launchpad_py import courier
from conftest import run_script
from nodes_for_tests import Toucher

OUTSIDER = '''
import sys
from launchpad_py import courier
address, transport, path = sys.argv[1:]
try:
    courier.Client(address, transport=transport, timeout=20).touch(path)
    print('RAN')
except courier.AuthenticationError as exc:
    print('REFUSED', exc)
'''




@pytest.mark.parametrize('launch_type', ['local_mt', 'local_mp', 'test_mp'])
@pytest.mark.parametrize('transport', ['grpc', 'tcp'])
def test_a_caller_outside_the_program_is_refused(launch_type, transport, tmp_path):
    """A plain courier.Client from another process raises AuthenticationError; nothing runs."""
    program = lp.Program('guarded')
    handle = program.add_node(lp.CourierNode(Toucher), label='toucher')
    trace = str(tmp_path / 'ran')
    with lp.launch(program, launch_type=launch_type):
        address = handle.dereference().address
        result = run_script(OUTSIDER, address, transport, trace)
        assert result.stdout.startswith('REFUSED'), result.stdout + result.stderr
        assert not os.path.exists(trace)
        inside = courier.Client(address, transport=transport, timeout=20)
        assert inside.touch(trace) == trace  # The launching process holds the secret.


@pytest.mark.parametrize('transport', ['grpc', 'tcp'])
def test_a_colocated_child_is_guarded_too(transport, tmp_path):
    """A node inside a MultiProcessingColocation child checks the program secret as well."""
    program = lp.Program('guarded')
    node = lp.CourierNode(Toucher)
    program.add_node(lp.MultiProcessingColocation([node]), label='toucher')
    trace = str(tmp_path / 'ran')
    with lp.launch(program, launch_type='local_mp'):
        address = node.courier_address.resolve()
        result = run_script(OUTSIDER, address, transport, trace)
        assert result.stdout.startswith('REFUSED'), result.stdout + result.stderr
        assert not os.path.exists(trace)
        assert courier.Client(address, transport=transport, timeout=20).touch(trace) == trace


def test_the_secret_is_on_no_command_line_and_in_no_environment():
    """Node processes get the secret without it showing in their argv or environment."""
    program = lp.Program('guarded')
    handle = program.add_node(lp.CourierNode(Toucher), label='toucher')
    with lp.launch(program, launch_type='local_mp') as controller:
        address = handle.dereference().address
        secret = courier.auth.secret_for(address)
        assert secret is not None and len(secret) == 32
        for status in controller.statuses():
            process = psutil.Process(status.pid)
            visible = ' '.join(process.cmdline()) + ' '.join(
                f'{k}={v}' for k, v in process.environ().items())
            assert secret.hex() not in visible and secret.hex().upper() not in visible


def test_each_launch_has_its_own_secret():
    """Two launches of the same program get different secrets."""
    seen = []
    for _ in range(2):
        program = lp.Program('guarded')
        handle = program.add_node(lp.CourierNode(Toucher), label='toucher')
        with lp.launch(program, launch_type='local_mt'):
            seen.append(courier.auth.secret_for(handle.dereference().address))
    assert seen[0] != seen[1] and None not in seen


def test_a_non_loopback_bind_without_a_secret_is_refused():
    """A server asked to bind a non-loopback interface with no secret refuses and says why."""
    with pytest.raises(ValueError, match='without a secret'):
        courier.Server(Toucher(), host='10.250.0.11')
    with pytest.raises(ValueError, match='without a secret'):
        courier.Server(Toucher(), host='0.0.0.0')


def test_insecure_opt_out_binds_without_a_secret(tmp_path):
    """insecure=True lets a server bind a non-loopback interface with no secret."""
    hosts = [a.address for addresses in psutil.net_if_addrs().values() for a in addresses
             if a.family == socket.AF_INET and not a.address.startswith('127.')]
    if not hosts:
        pytest.skip('this machine has no non-loopback IPv4 address')
    trace = str(tmp_path / 'ran')
    with courier.Server(Toucher(), host=hosts[0], insecure=True) as server:
        assert server.address == f'{hosts[0]}:{server.port}'
        assert courier.Client(server.address, timeout=20).touch(trace) == trace
