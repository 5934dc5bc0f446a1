"""Every dtype and pytree shape crosses processes exactly, by every path."""

from __future__ import annotations

import concurrent.futures

import pytest

import launchpad_py as lp
from launchpad_py import courier
from courier_test_nodes import BatchedEcho, Echo, fingerprint, relaxed, values

NAMES = sorted(values())
PATHS = ['local-sync', 'local-futures', 'grpc-sync', 'grpc-futures', 'tcp-sync', 'tcp-futures']


@pytest.fixture(scope='module')
def servers():
    """An Echo node and a batched Echo node, each in its own process."""
    program = lp.Program('payloads')
    echo = program.add_node(lp.CourierNode(Echo), label='echo')
    batched = program.add_node(lp.CourierNode(BatchedEcho), label='batched')
    with lp.launch(program, launch_type='test_mp'):
        yield echo.dereference().address, batched.dereference().address


def _caller(address: str, path: str):
    transport = path.split('-')[0]
    client = courier.Client(address, timeout=60,
                            transport='auto' if transport == 'local' else transport)
    if path.endswith('futures'):
        return lambda method, *args: getattr(client.futures, method)(*args).result(timeout=60)
    return lambda method, *args: getattr(client, method)(*args)


@pytest.mark.parametrize('path', PATHS)
@pytest.mark.parametrize('name', NAMES)
def test_value_reaches_the_server_exactly(servers, name, path):
    """The server sees the same type, dtype, shape and bytes the caller sent."""
    call = _caller(servers[0], path)
    value = values()[name]
    assert call('fingerprint', value) == fingerprint(value)


@pytest.mark.parametrize('path', PATHS)
@pytest.mark.parametrize('name', NAMES)
def test_value_returned_unchanged_is_exact(servers, name, path):
    """A value echoed by the server comes back identical."""
    call = _caller(servers[0], path)
    value = values()[name]
    assert fingerprint(call('echo', value)) == fingerprint(value)


@pytest.mark.parametrize('path', PATHS)
@pytest.mark.parametrize('name', NAMES)
def test_value_made_by_the_server_is_exact(servers, name, path):
    """A value created on the server arrives identical to one made here."""
    call = _caller(servers[0], path)
    assert fingerprint(call('make', name)) == fingerprint(values()[name])


@pytest.mark.parametrize('name', NAMES)
def test_value_through_a_batched_handler(servers, name):
    """Two concurrent callers of a batched echo each get their own value back."""
    client = courier.Client(servers[1], timeout=60)
    value = values()[name]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: client.echo(value), range(2)))
    for result in results:
        assert relaxed(result) == relaxed(value)


def test_received_arrays_are_writable(servers):
    """Arrays arrive writable on both paths, like a local copy."""
    for path in ('local-sync', 'grpc-sync'):
        for nbytes in (10, 100_000, 8 << 20):
            array = _caller(servers[0], path)('ones', nbytes)
            array[0] = 5
            assert array.flags.writeable and array[0] == 5


def test_main_module_values_travel_by_value():
    """Classes and lambdas from the launching script's __main__ reach a node process."""
    from conftest import run_script
    result = run_script(
        'import sys; sys.path.insert(0, "tests/courier")\n'
        'import launchpad_py as lp\n'
        'from courier_test_nodes import Echo\n'
        'class Point:\n'
        '    def __init__(self, x): self.x = x\n'
        'p = lp.Program("main_values")\n'
        'h = p.add_node(lp.CourierNode(Echo), label="echo")\n'
        'with lp.launch(p, launch_type="test_mp"):\n'
        '    c = h.dereference()\n'
        '    print(c.echo(Point(3)).x, c.echo(lambda v: v + 1)(4), c.futures.echo(Point(5))'
        '.result(60).x)\n')
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-3:] == ['3', '5', '5']
