"""courier.fail_fast_on_unavailable: calls to gone servers fail at once; live ones are untouched."""

from __future__ import annotations

import concurrent.futures
import threading
import time

import portpicker
import pytest

from launchpad_py import courier

TRANSPORTS = ['auto', 'grpc']


class Slow:
    def __init__(self):
        self.started = threading.Event()

    def ping(self):
        return 'pong'

    def slow(self):
        self.started.set()
        time.sleep(0.5)  # Work that is in progress when the rule starts.
        return 'done'


def _stopped_server_address() -> str:
    server = courier.Server(Slow()).start()
    address = server.address
    assert courier.Client(address).ping() == 'pong'
    server.stop()
    return address


def _call_in_thread(client: courier.Client) -> concurrent.futures.Future:
    """A synchronous call running in a thread of its own (the blocking path)."""
    result: concurrent.futures.Future = concurrent.futures.Future()

    def call():
        try:
            result.set_result(client.ping())
        except BaseException as exc:
            result.set_exception(exc)

    threading.Thread(target=call, daemon=True).start()
    return result


@pytest.mark.parametrize('transport', TRANSPORTS)
@pytest.mark.parametrize('how', ['sync', 'future'])
def test_call_waiting_for_a_gone_server_fails_once_the_rule_starts(transport, how):
    """A call already waiting for a stopped server raises CourierUnavailableError within 1 s."""
    address = _stopped_server_address()
    client = courier.Client(address, transport=transport)
    waiting = _call_in_thread(client) if how == 'sync' else client.futures.ping()
    with pytest.raises(concurrent.futures.TimeoutError):
        waiting.result(timeout=0.3)  # wait_for_ready: it waits for the server.
    end = courier.fail_fast_on_unavailable([address])
    try:
        started = time.monotonic()
        error = waiting.exception(timeout=10)
        elapsed = time.monotonic() - started
    finally:
        end()
    assert isinstance(error, courier.CourierUnavailableError), error
    assert address in str(error)
    assert elapsed <= 1.0


@pytest.mark.parametrize('transport', TRANSPORTS)
def test_new_call_to_a_gone_server_fails_at_once(transport):
    """Under a rule, a call to a stopped server raises instead of waiting for it."""
    address = _stopped_server_address()
    end = courier.fail_fast_on_unavailable()
    try:
        started = time.monotonic()
        with pytest.raises(courier.CourierUnavailableError, match=address):
            courier.Client(address, transport=transport).ping()
        assert time.monotonic() - started <= 1.0
    finally:
        end()


@pytest.mark.parametrize('transport', TRANSPORTS)
@pytest.mark.parametrize('how', ['sync', 'future'])
def test_a_rule_with_a_reason_says_it_in_the_error(transport, how):
    """A rule's ``why`` (a node that left its group for good) is in the error of a call that
    waited for the server and of a new one."""
    address = _stopped_server_address()
    client = courier.Client(address, transport=transport)
    waiting = _call_in_thread(client) if how == 'sync' else client.futures.ping()
    end = courier.fail_fast_on_unavailable([address], why="node 'x/1' left its group")
    try:
        errors = [waiting.exception(timeout=10)]
        with pytest.raises(courier.CourierUnavailableError) as new:
            courier.Client(address, transport=transport).ping()
        errors.append(new.value)
    finally:
        end()
    for error in errors:
        assert isinstance(error, courier.CourierUnavailableError), error
        assert address in str(error) and "node 'x/1' left its group" in str(error), error


@pytest.mark.parametrize('transport', ['auto', 'tcp', 'grpc'])
@pytest.mark.parametrize('secret', [None, b'a program secret of 32 bytes...'])
def test_a_future_to_a_gone_server_fails_in_the_future_not_in_the_call(transport, secret):
    """A future call that fails before it starts (a gRPC client with a secret first asks the
    server who it is) returns a failed future: a caller of futures handles a member that left
    in one place. Before, it raised from ``client.futures.m()`` (found by CI: the evolution
    strategies example's evolver died when an evaluator left between two generations)."""
    server = courier.Server(Slow(), secret=secret).start()
    address = server.address
    assert courier.Client(address, secret=secret).ping() == 'pong'
    server.stop()
    end = courier.fail_fast_on_unavailable([address], why="node 'x/1' left its group")
    try:
        future = courier.Client(address, transport=transport, secret=secret).futures.ping()
        error = future.exception(timeout=10)
    finally:
        end()
    assert isinstance(error, courier.CourierUnavailableError), error
    assert "node 'x/1' left its group" in str(error)


@pytest.mark.parametrize('transport', TRANSPORTS)
def test_calls_to_live_servers_are_untouched(transport):
    """A call in progress when the rule starts, and calls made under it, get their answers."""
    obj = Slow()
    with courier.Server(obj) as server:
        client = courier.Client(server.address, transport=transport)
        in_progress = client.futures.slow()
        assert obj.started.wait(10)
        end = courier.fail_fast_on_unavailable([server.address])
        try:
            assert in_progress.result(timeout=10) == 'done'
            assert client.slow() == 'done'
            assert client.ping() == 'pong'
        finally:
            end()


def test_calls_wait_for_their_server_again_once_the_rule_ends():
    """After end(), a call to a server that is not up yet waits for it, as by default."""
    address = _stopped_server_address()
    end = courier.fail_fast_on_unavailable([address])
    with pytest.raises(courier.CourierUnavailableError):
        courier.Client(address, transport='grpc').ping()
    end()
    waiting = courier.Client(address, transport='grpc').futures.ping()
    with pytest.raises(concurrent.futures.TimeoutError):
        waiting.result(timeout=0.3)
    port = int(address.rpartition(':')[2])
    with courier.Server(Slow(), port):
        assert waiting.result(timeout=30) == 'pong'


def test_a_rule_for_other_servers_leaves_calls_waiting():
    """Only the addresses a rule names fail fast."""
    address = _stopped_server_address()
    other = f'127.0.0.1:{portpicker.pick_unused_port()}'
    end = courier.fail_fast_on_unavailable([other])
    try:
        waiting = courier.Client(address, transport='grpc').futures.ping()
        with pytest.raises(concurrent.futures.TimeoutError):
            waiting.result(timeout=0.5)
        port = int(address.rpartition(':')[2])
        with courier.Server(Slow(), port):
            assert waiting.result(timeout=30) == 'pong'
    finally:
        end()
