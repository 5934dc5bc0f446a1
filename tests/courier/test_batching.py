"""``lp.batched_handler``: concurrent calls become one call, each caller gets its row."""

from __future__ import annotations

import concurrent.futures
import threading

import numpy as np
import pytest

import launchpad_py as lp
from launchpad_py import courier
from courier_test_nodes import BatchedPolicy


def _concurrently(function, count: int) -> list:
    with concurrent.futures.ThreadPoolExecutor(count) as pool:
        return list(pool.map(function, range(count)))


@pytest.mark.parametrize('transport', ['auto', 'grpc', 'tcp'])
def test_32_callers_into_batches_of_8_each_get_their_own_answer(transport):
    """32 concurrent remote callers, batch_size=8: every caller receives its own row."""
    policy = BatchedPolicy()
    with courier.Server(policy, thread_pool_size=32) as server:
        client = courier.Client(server.address, timeout=60, transport=transport)
        results = _concurrently(lambda i: client.act(np.full(3, i, np.float32), scale=2), 32)
    for i, result in enumerate(results):
        np.testing.assert_array_equal(result['action'], np.full(3, 2 * i, np.float32))
    assert sum(policy.batch_sizes) == 32 and max(policy.batch_sizes) == 8


def test_numeric_arguments_are_stacked():
    """Plain numbers (not arrays) stack into an array and come back as rows."""
    policy = BatchedPolicy()
    results = _concurrently(lambda i: policy.closure(i), 8)
    assert [int(r) for r in results] == [i + 1 for i in range(8)]


def test_three_callers_with_batch_size_two():
    """An odd number of callers: a full batch of 2 plus one that runs after the timeout."""
    double = lp.batched_handler(2, timeout=0.2)(lambda x: x * 2)
    assert [int(r) for r in _concurrently(double, 3)] == [0, 2, 4]


def test_pytree_arguments_and_results():
    """Dict, tuple and keyword arguments stack leaf by leaf and split back per caller."""
    @lp.batched_handler(4, timeout=5)
    def step(observation, extra=None):
        return {'sum': observation['a'][:, None] + observation['b'][0], 'tag': extra}

    results = _concurrently(
        lambda i: step({'a': np.float64(i), 'b': (np.ones(2) * i,)}, extra=f'caller{i}'), 4)
    for i, result in enumerate(results):
        np.testing.assert_array_equal(result['sum'], np.full(2, 2.0 * i))
        assert result['tag'] == f'caller{i}'


def test_an_exception_reaches_every_caller_of_the_batch():
    """When the batched function raises, each caller gets the exception, with its type."""
    @lp.batched_handler(3, timeout=5)
    def broken(x):
        raise KeyError('no batch today')

    def call(i):
        with pytest.raises(KeyError, match='no batch today'):
            broken(i)
        return True

    assert _concurrently(call, 3) == [True] * 3


def test_a_caller_with_mismatched_shapes_fails_alone():
    """A caller whose array shape differs from the batch's gets a TypeError; others succeed."""
    @lp.batched_handler(3, timeout=0.5)
    def total(x):
        return x.sum(axis=1)

    gate = threading.Barrier(3, timeout=30)

    def call(i):
        gate.wait()
        try:
            return float(total(np.ones(5 if i == 2 else 4)))
        except TypeError as exc:
            return str(exc)

    results = _concurrently(call, 3)
    assert sorted(r for r in results if isinstance(r, float)) == [4.0, 4.0] or \
        sorted(r for r in results if isinstance(r, float)) == [5.0]
    assert any(isinstance(r, str) and 'same structure and array shapes' in r for r in results)


def test_pad_batch_fills_a_short_batch():
    """With pad_batch the function always sees batch_size rows; callers get only theirs."""
    seen = []

    @lp.batched_handler(4, timeout=0.1, pad_batch=True)
    def identity(x):
        seen.append(len(x))
        return x

    assert int(identity(np.int32(7))) == 7
    assert seen == [4]


def test_direct_local_call_of_a_decorated_method():
    """Calling the decorated method directly (no server) runs a batch of one after timeout."""
    policy = BatchedPolicy(timeout=0.05)
    assert int(policy.closure(np.int64(41))) == 42


def test_method_batches_per_instance():
    """Two instances of a class with a batched method never mix their callers."""
    first, second = BatchedPolicy(), BatchedPolicy()
    results = _concurrently(
        lambda i: (first if i % 2 else second).act(np.float32(i))['action'], 16)
    assert [float(r) for r in results] == [float(i) for i in range(16)]
    assert first.batch_sizes == [8] and second.batch_sizes == [8]


@pytest.mark.parametrize('transport', ['auto', 'grpc', 'tcp'])
def test_thread_pool_of_batch_size_never_deadlocks(transport):
    """thread_pool_size=n serves a full batch of n callers with no timeout."""
    double = lp.batched_handler(6, timeout=None)(lambda x: x * 2)

    class Server:
        def double(self, x):
            return double(x)

    with courier.Server(Server(), thread_pool_size=6) as server:
        client = courier.Client(server.address, timeout=60, transport=transport)
        futures = [client.futures.double(i) for i in range(12)]
        assert [int(f.result(timeout=60)) for f in futures] == [2 * i for i in range(12)]


def test_batched_node_across_processes():
    """A CourierNode with a batched method, called by 16 concurrent futures from here."""
    program = lp.Program('batched')
    handle = program.add_node(lp.CourierNode(BatchedPolicy, courier_kwargs={
        'thread_pool_size': 8}), label='policy')
    with lp.launch(program, launch_type='test_mp'):
        client = handle.dereference()
        futures = [client.futures.act(np.arange(3) + i) for i in range(16)]
        for i, future in enumerate(futures):
            np.testing.assert_array_equal(future.result(timeout=60)['action'], np.arange(3) + i)
        assert client.sizes() == [8, 8]


def test_bad_arguments_are_rejected_with_the_value():
    """batch_size and timeout are checked when decorating, naming the bad value."""
    with pytest.raises(ValueError, match="batch_size must be a positive int \\(got 0\\)"):
        lp.batched_handler(0)
    with pytest.raises(ValueError, match='timeout'):
        lp.batched_handler(2, timeout='soon')


CALLERS = [1, 2, 3, 8]


@pytest.mark.parametrize('callers', CALLERS)
def test_a_list_argument_arrives_as_the_list_of_the_callers_lists(callers):
    """A list is not stacked: the function gets one list per caller, each caller its row."""
    seen = []

    @lp.batched_handler(callers, timeout=None)
    def compute(values):
        seen.append(values)
        return np.sum(values, axis=1)

    results = _concurrently(lambda i: compute([i, i + 1]), callers)
    assert [int(r) for r in results] == [2 * i + 1 for i in range(callers)]
    assert len(seen) == 1 and isinstance(seen[0], list)
    assert sorted(seen[0]) == [[i, i + 1] for i in range(callers)]


@pytest.mark.parametrize('callers', CALLERS)
def test_scalar_arguments_arrive_stacked_on_a_new_axis(callers):
    """Numbers from n callers arrive as one array of shape (n,); each caller gets its row."""
    seen = []

    @lp.batched_handler(callers, timeout=None)
    def double(x):
        seen.append(x)
        return x * 2

    assert [int(r) for r in _concurrently(double, callers)] == [2 * i for i in range(callers)]
    assert len(seen) == 1 and seen[0].shape == (callers,)


@pytest.mark.parametrize('callers', CALLERS)
def test_a_list_result_gives_each_caller_its_item(callers):
    """A returned list is split by position, like an array: caller i gets item i."""
    @lp.batched_handler(callers, timeout=None)
    def describe(values):
        return [f'{a}+{b}' for a, b in values]

    results = _concurrently(lambda i: describe([i, i + 1]), callers)
    assert results == [f'{i}+{i + 1}' for i in range(callers)]


def test_the_original_batching_example_over_a_server():
    """The original's example: list arguments summed over axis 0, one result row per caller."""
    class Summer:
        def __init__(self):
            self.compute = lp.batched_handler(batch_size=3, timeout=None)(self.compute)

        def compute(self, values):
            return np.tile(np.sum(values, axis=0), (len(values), 1))

    with courier.Server(Summer(), thread_pool_size=3) as server:
        client = courier.Client(server.address, call_timeout=60)
        results = _concurrently(lambda i: client.compute([i, i + 1]), 3)
    for result in results:
        np.testing.assert_array_equal(result, [3, 6])
