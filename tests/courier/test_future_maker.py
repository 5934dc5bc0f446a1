"""A call's future made in C is the one ``CallFuture.__init__`` makes, and keeps the futures API.

The compiled loop makes each future with ``_cframes.future_maker`` (``_future.c``), filling
its slots without running ``__init__``; the pure loop calls ``__init__``. Both must give the
same fields, and a future made either way must work with ``concurrent.futures``.
"""

from __future__ import annotations

import concurrent.futures
import threading

import pytest
from frame_loops import loop  # noqa: F401 (the fixture)

from launchpad_py import courier
from launchpad_py.courier import frame_loop
from launchpad_py.courier.transports.sockets import call_future

_cframes = frame_loop.compiled()
needs_compiled = pytest.mark.skipif(_cframes is None, reason='the compiled loop is not built')


class _Connection:
    """What a future takes from its connection when it is made: the shared condition."""

    def __init__(self):
        self.condition = threading.Condition()


def _maker(connection):
    return _cframes.future_maker(call_future.CallFuture, call_future.Watched,
                                 call_future.FIELDS, connection, connection.condition,
                                 call_future.PENDING)


@needs_compiled
def test_a_made_future_has_the_fields_init_gives():
    """Every slot the maker fills holds what ``__init__`` stores; the waiter list knows it."""
    connection, hook = _Connection(), print
    made = _maker(connection)(7, 12.5, hook)
    built = call_future.CallFuture(connection, 7, 12.5, hook)
    for name in call_future.FIELDS:
        if name != '_waiters':
            assert getattr(made, name) == getattr(built, name), name
    assert type(made._waiters) is call_future.Watched and made._waiters == []
    assert made._waiters.future is made
    made.extra = 'kept'  # Anything else a caller sets lives in the instance's __dict__.
    assert made.extra == 'kept' and not made.settled()


@needs_compiled
def test_a_maker_refuses_a_class_whose_field_is_no_slot():
    """A class laid out otherwise (a stale build beside changed Python) is refused, not
    written into."""

    class Plain(concurrent.futures.Future):
        pass

    connection = _Connection()
    with pytest.raises(TypeError, match='_condition'):
        _cframes.future_maker(Plain, call_future.Watched, call_future.FIELDS, connection,
                              connection.condition, call_future.PENDING)


def test_futures_wait_as_completed_callbacks_and_cancel_work_on_each_loop(loop):
    """``wait``, ``as_completed``, a done-callback and a cancelled future behave as on any
    ``concurrent.futures.Future``, whichever loop made the futures."""

    class Echo:
        def echo(self, value):
            return value

    with courier.Server(Echo(), thread_pool_size=4) as server:
        client = courier.Client(server.address)
        futures = [client.futures.echo(i) for i in range(16)]
        done, _ = concurrent.futures.wait(futures, timeout=30)
        assert sorted(f.result() for f in done) == list(range(16))
        more = [client.futures.echo(i) for i in range(8)]
        assert sorted(f.result() for f in concurrent.futures.as_completed(more, timeout=30)) \
            == list(range(8))
        seen = threading.Event()
        called = client.futures.echo('cb')
        called.add_done_callback(lambda f: seen.set())
        assert seen.wait(30) and called.result(timeout=30) == 'cb'
        cancelled = call_future.CallFuture(_Connection(), 1, None)
        assert cancelled.cancel() and cancelled.cancelled()
        with pytest.raises(concurrent.futures.CancelledError):
            cancelled.result(timeout=0)
