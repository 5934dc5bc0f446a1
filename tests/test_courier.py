"""Courier on its own: which methods are served, call options, and errors."""

from __future__ import annotations

import datetime
import threading

import numpy as np
import pytest

from launchpad_py import courier


class Delegating:
    """Forwards unknown attributes to a wrapped object, like many wrappers do."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)


class Target:
    def __init__(self):
        self.release = threading.Event()

    def add(self, a, b):
        return a + b

    @property
    def adder(self):
        return lambda a: a + 100

    def wait_for_release(self):
        return self.release.wait(30)

    def run(self):
        return 'never served'

    def _private(self):
        return 'never served'

    def __call__(self, x):
        return ('called', x)


@pytest.fixture
def served():
    target = Target()
    server = courier.Server(target, label='target').start()
    yield target, server
    target.release.set()
    server.stop()


def test_public_methods_properties_and_call(served):
    """Public methods, properties returning callables and __call__ are served."""
    _, server = served
    client = courier.Client(server.address)
    assert client.add(2, 3) == 5
    assert client.adder(1) == 101
    assert client(4) == ('called', 4)
    assert courier.list_methods(client) == ['__call__', 'add', 'adder', 'wait_for_release']


class Doubler:
    def add(self, a, b):
        return 2 * (a + b)


def test_replace_object_serves_the_new_object_on_open_connections():
    """After replace_object, sync calls and futures on connections already open reach it."""
    with courier.Server(Target()) as server:
        client = courier.Client(server.address)
        assert client.add(1, 2) == 3 and client.futures.add(1, 2).result(timeout=30) == 3
        server.replace_object(Doubler())
        assert client.add(1, 2) == 6 and client.futures.add(1, 2).result(timeout=30) == 6
        assert courier.list_methods(client) == ['add']


@pytest.mark.parametrize('path', ['sync', 'futures'])
def test_a_method_replaced_on_the_object_after_calls_is_served_anew(served, path):
    """A method set on the served object itself after it was called (and looked up) is the
    one later calls run, on a connection already open; removing it serves the class's again."""
    target, server = served
    client = courier.Client(server.address)
    call = client.add if path == 'sync' else lambda *a: client.futures.add(*a).result(timeout=30)
    assert call(1, 2) == 3 and call(1, 2) == 3
    target.add = lambda a, b: ('replaced', a, b)
    assert call(1, 2) == ('replaced', 1, 2)
    del target.add
    assert call(1, 2) == 3


def test_a_delegating_wrapper_serves_what_it_delegates_to_now():
    """A wrapper whose ``__getattr__`` forwards to an object it swaps serves the new
    object's method from the next call: such wrappers are asked on every call."""
    wrapper = Delegating(Target())
    with courier.Server(wrapper) as server:
        client = courier.Client(server.address)
        assert client.add(1, 2) == 3
        wrapper._inner = Doubler()
        assert client.add(1, 2) == 6


def test_delegating_wrapper_is_served():
    """Methods reached through __getattr__ delegation work."""
    with courier.Server(Delegating(Target())) as server:
        assert courier.Client(server.address).add(1, 1) == 2


@pytest.mark.parametrize('name', ['run', '_private', 'missing'])
def test_hidden_or_unknown_method_lists_the_available_ones(served, name):
    """run, private and unknown names are refused with the list of public methods."""
    _, server = served
    with pytest.raises(courier.UnknownMethodError, match=f"'{name}'.*available: __call__, add"):
        courier.Client(server.address).call(name)


def test_lambdas_and_arrays_travel(served):
    """cloudpickle carries lambdas; numpy arrays go both ways."""
    _, server = served
    client = courier.Client(server.address)
    assert client.add(np.arange(3), np.ones(3)).tolist() == [1.0, 2.0, 3.0]
    assert client.add('a', 'b') == 'ab'
    assert client.add(b'x', b'y') == b'xy'
    assert client.add((1,), (2,)) == (1, 2)
    assert client.add([lambda x: x * 3], [])[0](5) == 15


@pytest.mark.parametrize('timeout', [0.2, 1, datetime.timedelta(milliseconds=300)])
def test_timeouts_accept_float_int_and_timedelta(served, timeout):
    """A call slower than the timeout raises CourierTimeoutError (also a TimeoutError)."""
    _, server = served
    client = courier.Client(server.address, timeout=timeout)
    with pytest.raises(TimeoutError):
        client.wait_for_release()
    with pytest.raises(courier.CourierTimeoutError, match='wait_for_release'):
        client.wait_for_release()


def test_falsy_timeout_means_none(served):
    """timeout=0 means no deadline, not an immediate timeout."""
    target, server = served
    client = courier.Client(server.address, timeout=0)
    future = client.futures.wait_for_release()
    target.release.set()
    assert future.result(timeout=30) is True


def test_futures_carry_remote_exceptions(served):
    """A future's exception is the remote exception, rebuilt."""
    _, server = served
    future = courier.Client(server.address).futures.add(1, 'x')
    with pytest.raises(TypeError, match='unsupported operand'):
        future.result(timeout=30)


def test_unreachable_server_is_unavailable():
    """Without wait-for-ready, a dead address fails fast with CourierUnavailableError."""
    with courier.Server(Target()) as server:
        address = server.address
    client = courier.Client(address, wait_for_ready=False, timeout=10)
    with pytest.raises(courier.CourierUnavailableError, match=address):
        client.add(1, 2)
    with pytest.raises(ConnectionError):
        client.add(1, 2)


def test_unpicklable_exception_arrives_as_remote_error():
    """An exception that cannot be pickled still arrives, with its type name and message."""

    class Local(Exception):
        def __reduce__(self):
            raise TypeError('not picklable')

    class Raiser:
        def go(self):
            raise Local('details here')

    with courier.Server(Raiser()) as server:
        with pytest.raises(courier.RemoteError, match='Local: details here'):
            courier.Client(server.address).go()


def test_port_in_use_is_a_clear_error():
    """Binding a port another server holds fails, naming the address."""
    with courier.Server(Target()) as first:
        with pytest.raises(courier.CourierError, match=f'could not bind 127.0.0.1:{first.port}'):
            courier.Server(Target(), port=first.port).start()


def test_invalid_arguments_are_rejected():
    """Bad addresses, timeouts and pool sizes are reported with the value."""
    with pytest.raises(ValueError, match="'nowhere'"):
        courier.Client('nowhere')
    with pytest.raises(TypeError, match="'soon'"):
        courier.Client('127.0.0.1:1', timeout='soon')
    with pytest.raises(ValueError, match='thread_pool_size'):
        courier.Server(Target(), thread_pool_size=0)


def test_client_private_attributes_stay_local(served):
    """Probing a client for private names never becomes a remote call."""
    _, server = served
    client = courier.Client(server.address)
    assert not hasattr(client, '_repr_html_')
    assert not hasattr(client.futures, '_anything')
