"""The future of a courier call: waiting for it reads replies off its connection.

It is a ``concurrent.futures.Future`` (``wait``, ``as_completed`` and callbacks
work), whose ways of waiting tell its connection who needs the replies: a
caller in ``result()``/``exception()`` reads them itself; ``done()``, a
callback or a waiter of ``wait``/``as_completed`` asks the connection's
background thread to deliver it (see ``futures_connection.py``).
"""

from __future__ import annotations

import concurrent.futures
from concurrent.futures import _base

PENDING, FINISHED = _base.PENDING, _base.FINISHED


#: A ``CallFuture``'s fields, in the order ``_cframes.future_maker`` fills them.
FIELDS = ('_condition', '_waiters', '_mux', '_call_id', '_deadline', '_on_failure', '_state',
          '_result', '_exception', '_done_callbacks')


class CallFuture(concurrent.futures.Future):
    """A call's ``concurrent.futures.Future``; waiting for it reads from the connection.

    The futures of one connection share its condition (making one per call
    cost more than the rest of a call's bookkeeping): ``Future``'s own waits
    are only reached once the future is done, and ``wait_for`` loops.

    Its fields, ``Future``'s included, are slots: C members of the instance, which the
    compiled loop fills when it makes a future (``_cframes.future_maker``, no ``__init__``
    runs) and reads and stores when it completes one (``_settle.c``). ``Future``'s code
    reaches them by name as before; anything else set on a future goes to its ``__dict__``.
    """

    __slots__ = FIELDS

    def __init__(self, mux, call_id: int, deadline: float | None, on_failure=None):
        # What the compiled maker stores, for the pure loop: ``mux`` is the FuturesConnection;
        # ``on_failure``: as ``on_failure(fn)`` sets it, given here by a caller that sets it on
        # every future (a client following its server), two Python calls less per call.
        self._condition = mux.condition
        self._waiters = waiters = Watched()
        waiters.future = self
        self._mux, self._call_id, self._deadline = mux, call_id, deadline
        self._on_failure = on_failure
        self._state = PENDING
        self._result = self._exception = None
        # A future's first done-callback gives it a list of its own (``add_done_callback``);
        # ``Future`` only ever appends to it there, and iterates it.
        self._done_callbacks = ()

    def on_failure(self, fn) -> None:
        """Calls ``fn(self)`` if this call fails, without observing it: unlike a done-callback,
        it asks no background delivery, so its caller's ``result()`` still reads the reply
        itself (a client that follows moved servers notes failures this way)."""
        self._on_failure = fn

    def settled(self) -> bool:
        """``done()`` without observing: no background delivery is asked for."""
        return self._state != PENDING

    def deliver(self, value) -> None:
        """``set_result`` for the reader: skips the notifying nobody needs (no waiter, no callback)."""
        condition = self._condition
        with condition._lock:  # Condition.__enter__ is Python code around this same lock.
            if self._state != PENDING:
                return  # Cancelled by the user.
            self._result = value
            self._state = FINISHED
            for waiter in self._waiters:
                waiter.add_result(self)
            if condition._waiters:  # Threads waiting on the connection's condition.
                condition.notify_all()
        if self._done_callbacks:
            self._invoke_callbacks()

    def result(self, timeout=None):
        if self._state == PENDING:
            self._mux.wait_for(self, timeout)
        if self._state == FINISHED and self._exception is None:
            # Its waiter list knows it (a cycle): unknowing it frees the future by refcount
            # once its caller drops it, not in the garbage collector's next pass.
            self._waiters.future = None
            return self._result
        return super().result(timeout=0)

    def exception(self, timeout=None):
        if self._state == PENDING:
            self._mux.wait_for(self, timeout)
        return super().exception(timeout=0)

    def done(self) -> bool:
        if self._state == PENDING:
            self._mux.watched(self)
            return False
        return super().done()

    def add_done_callback(self, fn) -> None:
        if self._state == PENDING:
            self._mux.watched(self)
        with self._condition:  # Where Future.add_done_callback appends, under the same lock.
            if not isinstance(self._done_callbacks, list):  # The shared empty tuple.
                self._done_callbacks = []
        super().add_done_callback(fn)


class Watched(list):
    """A future's waiter list (``wait``, ``as_completed``): a waiter added asks for delivery."""

    __slots__ = ('future',)

    def append(self, waiter) -> None:
        super().append(waiter)
        future = self.future
        if future is not None:  # None once its value was read (``result``): nothing to deliver.
            future._mux.watched(future)


def settle(future: CallFuture, outcome, failed: bool = False) -> None:
    """Completes ``future``; one the user cancelled keeps its state."""
    try:
        if failed:
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
    except concurrent.futures.InvalidStateError:
        return
    if failed and future._on_failure is not None:
        future._on_failure(future)


