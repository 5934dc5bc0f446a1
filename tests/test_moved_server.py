"""A courier client that follows a server to a new address (``Client(relocate=...)``).

Kubernetes restarts a node as a new pod at a new address; a handle to it makes clients with
``relocate``, and the launcher declares the old address gone (``fail_fast_on_unavailable``) in
every process. These tests do the same with two real servers on loopback: the first stops,
the second serves elsewhere.
"""

from __future__ import annotations

import contextlib

import pytest

from launchpad_py import courier


class Where:
    def __init__(self, name):
        self._name = name

    def name(self):
        return self._name


@pytest.mark.parametrize('transport', ['auto', 'tcp', 'grpc'])
def test_client_loses_one_call_then_follows_the_server_to_its_new_address(transport):
    """The call that finds nobody at the old address fails with CourierUnavailableError
    (it does not wait there); the next asks ``relocate`` (given the old address) and succeeds."""
    asked = []
    with courier.Server(Where('first')) as first:
        old = first.address
        with courier.Server(Where('second')) as second:
            client = courier.Client(old, transport=transport, timeout=30,
                                    relocate=lambda stale: asked.append(stale) or second.address)
            assert client.name() == 'first' and asked == []
            first.stop()
            gone = courier.fail_fast_on_unavailable([old])
            try:
                with pytest.raises(courier.CourierUnavailableError):
                    client.name()
                assert client.name() == 'second' and asked == [old]
                assert client.futures.name().result(timeout=30) == 'second'
                assert asked == [old]  # Asked once: the client stays at the new address.
            finally:
                gone()


def test_futures_lose_one_call_then_follow_too():
    """A future that failed unavailable makes the next call ask ``relocate`` as well."""
    with courier.Server(Where('first')) as first, courier.Server(Where('second')) as second:
        client = courier.Client(first.address, timeout=30, relocate=lambda stale: second.address)
        assert client.futures.name().result(timeout=30) == 'first'
        first.stop()
        gone = courier.fail_fast_on_unavailable([first.address])
        try:
            with pytest.raises(courier.CourierUnavailableError):
                client.futures.name().result(timeout=30)
            assert client.futures.name().result(timeout=30) == 'second'
        finally:
            gone()


@contextlib.contextmanager
def _gone_then_elsewhere(timeout: float):
    """A gRPC client with a secret, of a server that stopped and serves at another address
    now (``relocate`` says where); yields (the client, its old address)."""
    secret = b'moved-server-test-secret-32bytes'
    with courier.Server(Where('first'), secret=secret) as first, \
            courier.Server(Where('second'), secret=secret) as second:
        old = first.address
        first.stop()
        yield courier.Client(old, transport='grpc', secret=secret, timeout=timeout,
                             relocate=lambda stale: second.address), old


def test_a_future_that_fails_before_it_starts_makes_the_next_call_follow_too():
    """With a secret, a gRPC future first asks the server who it is; at a gone address that
    fails before any future exists, and the next call must still ask ``relocate`` (found by
    the Kubernetes fault runs: a CacherNode kept calling its restarted upstream's old pod)."""
    with _gone_then_elsewhere(timeout=30) as (client, old):
        gone = courier.fail_fast_on_unavailable([old])
        try:
            with pytest.raises(courier.CourierUnavailableError):
                client.futures.name().result(timeout=30)
            assert client.futures.name().result(timeout=30) == 'second'
        finally:
            gone()


class Frozen:
    """A server that accepts calls and never answers them: a node paused, or a pod whose
    address silently leads nowhere (its network gone without a reset)."""

    def __init__(self):
        self.release = __import__('threading').Event()

    def name(self):
        self.release.wait(30)
        return 'frozen'


@pytest.mark.parametrize('path', ['sync', 'futures'])
def test_a_call_that_timed_out_makes_the_next_call_ask_where_the_server_is(path):
    """A server that moved while its old address still accepts (and answers nothing) fails
    calls by timeout, not unavailability; the next call must still ask ``relocate``, or a
    client retrying on timeouts waits at the old address for ever (the podman fault run
    12 of stop 38: the cache and the coordinator kept timing out at evicted ``params``)."""
    frozen = Frozen()
    with courier.Server(frozen) as first, courier.Server(Where('second')) as second:
        asked = []
        client = courier.Client(first.address, timeout=0.5,
                                relocate=lambda stale: asked.append(stale) or second.address)
        call = client.name if path == 'sync' else lambda: client.futures.name().result(30)
        try:
            with pytest.raises(courier.CourierTimeoutError):
                call()
            assert call() == 'second' and asked == [first.address]
        finally:
            frozen.release.set()
