"""Objects served in the courier tests; importable by node processes."""

from __future__ import annotations

import collections
import dataclasses
import os
import threading

import numpy as np

import launchpad_py as lp

Point = collections.namedtuple('Point', 'x y')


@dataclasses.dataclass
class Transition:
    observation: np.ndarray
    reward: float


def values() -> dict:
    """Every kind of value the courier must carry exactly, by name."""
    import ml_dtypes
    rng = np.random.default_rng(0)
    big = np.arange(4096, dtype=np.float64).reshape(64, 64)
    out = {
        'bool': np.array([True, False, True]),
        'int8': np.arange(-5, 5, dtype=np.int8),
        'uint16': np.arange(3000, dtype=np.uint16),
        'int64': np.arange(-2000, 2000, dtype=np.int64),
        'float16': rng.normal(size=700).astype(np.float16),
        'bfloat16': rng.normal(size=900).astype(ml_dtypes.bfloat16),
        'float32': rng.normal(size=(30, 40)).astype(np.float32),
        'float64': rng.normal(size=2000),
        'complex64': (rng.normal(size=300) + 1j * rng.normal(size=300)).astype(np.complex64),
        'complex128': rng.normal(size=300) + 1j * rng.normal(size=300),
        'bytes_fixed': np.array([b'ab', b'cde', b''] * 200, dtype='S3'),
        'unicode': np.array(['α', 'beta', ''] * 200, dtype='U4'),
        'object': np.array([1, 'two', None, {'three': 3}], dtype=object),
        'structured': np.array([(1, 2.5, b'x'), (3, -1.0, b'yz')] * 100,
                               dtype=[('a', '<i4'), ('b', '<f8'), ('c', 'S2')]),
        'zero_d': np.array(3.25),
        'non_contiguous': big[::3, 1::2],
        'transposed': big.T,
        'big_endian': np.arange(1000, dtype='>i4'),
        'big_endian_float': rng.normal(size=1000).astype('>f8'),
        'empty': np.zeros((0, 3), np.float32),
        'scalar': np.float32(1.5),
    }
    out['pytree'] = {
        'list': [out['float32'], 7, 'text'],
        'tuple': (out['bfloat16'], (out['int8'],)),
        'namedtuple': Point(out['zero_d'], out['non_contiguous']),
        'dataclass': Transition(out['float64'], 0.5),
        'nested': {'deeper': {'structured': out['structured']}},
    }
    return out


def fingerprint(value):
    """Type, dtype, shape and bytes of every array in ``value``, for exact comparison."""
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        data = array.tolist() if array.dtype.hasobject else np.ascontiguousarray(array).tobytes()
        return (type(value).__name__, array.dtype.str, array.dtype.descr, array.shape, data)
    if isinstance(value, dict):
        return {k: fingerprint(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [fingerprint(v) for v in value])
    if dataclasses.is_dataclass(value):
        return (type(value).__name__, fingerprint(dataclasses.asdict(value)))
    return value


class Echo:
    """Returns what it gets, describes what it got, and makes values of its own."""

    def echo(self, value):
        return value

    def fingerprint(self, value):
        return fingerprint(value)

    def make(self, name):
        return values()[name]

    def pid(self):
        return os.getpid()

    def jax_arange(self, n):
        import jax.numpy as jnp
        return {'values': jnp.arange(n)}

    def crash(self):
        os._exit(3)

    def ones(self, nbytes):
        return np.ones(nbytes, np.uint8)

    def total(self, array):
        return int(array.sum(dtype=np.int64))


class BatchedPolicy:
    """A batched method and a batched closure bound in ``__init__``."""

    def __init__(self, batch_size=8, timeout=5.0):
        self.batch_sizes = []
        self._lock = threading.Lock()
        self.closure = lp.batched_handler(batch_size, timeout=timeout)(self._plus_one)

    @lp.batched_handler(8, timeout=5.0)
    def act(self, observation, scale=None):
        with self._lock:
            self.batch_sizes.append(len(observation))
        if scale is not None:  # Each caller's scale is stacked too: one per row.
            observation = observation * np.reshape(
                scale, (len(observation),) + (1,) * (np.ndim(observation) - 1))
        return {'action': observation, 'index': np.arange(len(observation))}

    def _plus_one(self, x):
        return x + 1

    def sizes(self):
        return list(self.batch_sizes)


class BatchedEcho:
    """Echoes through a batched handler: pairs of calls run as one."""

    def __init__(self):
        self.echo = lp.batched_handler(2, timeout=10.0)(lambda value: value)


def relaxed(value):
    """``fingerprint`` after batching: numbers and 0-d rows compare as arrays."""
    leaves, structure = __import__('launchpad_py.courier.pytree', fromlist=['x']).flatten(value)
    return structure, [fingerprint(np.asarray(leaf)) if isinstance(leaf, (np.generic, int, float,
                                                                             np.ndarray))
                       else fingerprint(leaf) for leaf in leaves]
