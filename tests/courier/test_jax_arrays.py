"""JAX arrays travel as numpy arrays, or come back as JAX arrays on request."""

from __future__ import annotations

import numpy as np
import pytest

from launchpad_py import courier
from courier_test_nodes import Echo

jax = pytest.importorskip('jax', reason='jax is in the dev extra: pip install -e .[dev]')


@pytest.mark.parametrize('transport', ['auto', 'grpc', 'tcp'])
def test_jax_arrays_arrive_as_numpy(transport):
    """A pytree of JAX arrays is received as numpy arrays with the same values."""
    with courier.Server(Echo()) as server:
        client = courier.Client(server.address, transport=transport)
        tree = {'w': jax.numpy.arange(6.0).reshape(2, 3), 'b': [jax.numpy.ones(3, 'bfloat16')]}
        result = client.echo(tree)
    assert type(result['w']) is np.ndarray and type(result['b'][0]) is np.ndarray
    np.testing.assert_array_equal(result['w'], np.arange(6.0).reshape(2, 3))
    assert str(result['b'][0].dtype) == 'bfloat16'


@pytest.mark.parametrize('transport', ['auto', 'grpc', 'tcp'])
def test_device_arrays_on_request(transport):
    """A client made with device_arrays=True gets the server's JAX arrays as JAX arrays."""
    with courier.Server(Echo()) as server:
        client = courier.Client(server.address, device_arrays=True, transport=transport)
        result = client.futures.jax_arange(4).result(timeout=60)['values']
        assert type(client.jax_arange(4)['values']) is type(result)
    assert isinstance(result, jax.Array)
    np.testing.assert_array_equal(np.asarray(result), np.arange(4))


def test_a_plain_decode_after_device_decodes_skips_the_flag_again():
    """Once every device-arrays decode has ended (one by raising), none is counted: a plain
    decode takes its fast path and a reply's JAX arrays arrive as numpy arrays again."""
    from launchpad_py.courier import serialization
    pickled, buffers = serialization.encode(('ok', jax.numpy.arange(3)))
    assert isinstance(serialization.decode(pickled, buffers, device_arrays=True)[1], jax.Array)
    with pytest.raises(Exception):
        serialization.decode(b'not a pickle', [], device_arrays=True)
    assert serialization.device_decodes == 0
    assert type(courier.client.decode_reply(pickled, buffers)) is np.ndarray
