"""Payloads larger than one gRPC message travel in chunks; huge ones on request."""

from __future__ import annotations

import os

import numpy as np
import psutil
import pytest

from launchpad_py import courier
from courier_test_nodes import Echo

LIMIT = 64 * 1024  # A lowered gRPC message limit, so chunking runs on small arrays.


@pytest.fixture
def chunking_server():
    with courier.Server(Echo(), max_message_bytes=LIMIT) as server:
        yield server


def _grpc_client(server, **kwargs):
    return courier.Client(server.address, transport='grpc', max_message_bytes=LIMIT,
                          timeout=60, **kwargs)


def test_request_larger_than_the_limit_is_chunked(chunking_server):
    """A request of ~10 messages' worth arrives whole."""
    array = np.random.default_rng(1).integers(0, 255, 10 * LIMIT + 123, dtype=np.uint8)
    assert _grpc_client(chunking_server).total(array) == int(array.sum(dtype=np.int64))


def test_reply_larger_than_the_limit_is_chunked(chunking_server):
    """A reply of ~10 messages' worth is fetched whole, sync and as a future."""
    client = _grpc_client(chunking_server)
    assert client.ones(10 * LIMIT + 7).sum() == 10 * LIMIT + 7
    assert client.futures.ones(10 * LIMIT + 7).result(timeout=60).sum() == 10 * LIMIT + 7


def test_round_trip_larger_than_the_limit(chunking_server):
    """An array echoed both ways in chunks is identical, and writable."""
    array = np.random.default_rng(2).normal(size=(300, 200))
    result = _grpc_client(chunking_server).echo(array)
    np.testing.assert_array_equal(result, array)
    assert result.flags.writeable


def test_too_small_a_limit_is_rejected():
    """A message limit below 1 KiB is refused, naming the value."""
    with pytest.raises(ValueError, match='max_message_bytes must be at least 1024 \\(got 10\\)'):
        courier.Server(Echo(), max_message_bytes=10)


@pytest.mark.skipif(os.environ.get('LAUNCHPAD_SLOW_TESTS') != '1'
                    or psutil.virtual_memory().available < 16 << 30,
                    reason='slow (about a minute) and needs 16 GiB free: run with '
                           'LAUNCHPAD_SLOW_TESTS=1 on a machine with the memory')
@pytest.mark.timeout(900)
@pytest.mark.parametrize('transport', ['auto', 'grpc', 'tcp'])
def test_payload_over_2_gib(transport):
    """A 2.1 GiB array reaches the server and its total comes back (gRPC's cap is 2 GiB)."""
    with courier.Server(Echo()) as server:
        client = courier.Client(server.address, transport=transport, timeout=600)
        array = np.ones((2 << 30) + (100 << 20), np.uint8)
        assert client.total(array) == array.size
