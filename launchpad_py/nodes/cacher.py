"""``CacherNode``: answers repeated calls to a courier node from a cache.

    params = p.add_node(lp.CourierNode(ParameterServer), label='params')
    cached = p.add_node(lp.CacherNode(params, refresh_interval_ms=100), label='cache')
    p.add_node(lp.CourierNode(Actor, cached), label='actor')  # cached.get_params() as on params

Many callers asking the same thing (actors polling a parameter server) cost
the upstream one call per refresh interval instead of one call each.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import random
import threading
import time
from typing import Any, Iterator

from launchpad_py import courier
from launchpad_py.node_side import runtime
from launchpad_py.courier import serialization
from launchpad_py.errors import NotRunningError
from launchpad_py.nodes.courier_node import CourierHandle, _UnderConstruction, start_server
from launchpad_py.program.address import Address
from launchpad_py.program.handle import Handle
from launchpad_py.program.node import ExecutionContext, Executable, Node

_log = logging.getLogger(__name__)


class _Entry:
    """One cached answer: the value, when its fetch started, and the fetch in flight."""

    __slots__ = ('value', 'fetched_at', 'inflight', 'inflight_started')

    def __init__(self) -> None:
        self.value: Any = None
        self.fetched_at: float | None = None  # None: no value yet.
        self.inflight: concurrent.futures.Future | None = None
        self.inflight_started = 0.0


class Cache:
    """Serves any method of ``upstream``, answering from memory while answers are fresh.

    Ages count from the moment the upstream call *started*, so an answer is
    never older than its age says. Errors are passed to the callers waiting
    for them and never stored.
    """

    def __init__(self, upstream: courier.Client, refresh_s: float, stale_s: float):
        self._upstream = upstream
        self._refresh_s = refresh_s
        self._stale_s = stale_s
        self._entries: dict[bytes, _Entry] = {}
        self._lock = threading.RLock()  # A call that is done at once runs _finish inline.

    def __getattr__(self, name: str):
        if name.startswith('_'):
            raise AttributeError(name)
        return lambda *args, **kwargs: self._lookup(name, args, kwargs)

    def __dir__(self) -> list[str]:
        return self._upstream.list_methods()

    def _lookup(self, method: str, args: tuple, kwargs: dict) -> Any:
        key = serialization.dumps((method, args, kwargs))
        arrived = time.monotonic()
        with self._lock:
            entry = self._entries.setdefault(key, _Entry())
            if entry.fetched_at is not None:
                age = arrived - entry.fetched_at
                if age < self._stale_s:
                    if age >= self._refresh_s and entry.inflight is None:
                        self._start_fetch(entry, method, args, kwargs)
                    return entry.value
            if entry.inflight is None:
                future, started = self._start_fetch(entry, method, args, kwargs)
            else:
                future, started = entry.inflight, entry.inflight_started
        value = future.result()
        if started < arrived and time.monotonic() - started >= self._stale_s:
            # The fetch we joined began before we came and took too long: ask again.
            return self._fresh(entry, arrived, method, args, kwargs)
        return value

    def _fresh(self, entry: _Entry, arrived: float, method: str, args: tuple, kwargs: dict) -> Any:
        """A value whose fetch started after ``arrived``: fresh enough by construction."""
        with self._lock:
            if entry.inflight is None or entry.inflight_started < arrived:
                future, _ = self._start_fetch(entry, method, args, kwargs)
            else:
                future = entry.inflight
        return future.result()

    def _start_fetch(self, entry: _Entry, method: str, args: tuple,
                     kwargs: dict) -> tuple[concurrent.futures.Future, float]:
        """Starts an upstream call for ``entry``; the caller holds the lock.

        A call that is already done runs ``_finish`` inline, clearing
        ``entry.inflight`` again, so callers use the returned future.
        """
        started = time.monotonic()
        future = self._upstream.call_future(method, *args, **kwargs)
        entry.inflight, entry.inflight_started = future, started
        future.add_done_callback(lambda done: self._finish(entry, done, started))
        return future, started

    def _finish(self, entry: _Entry, done: concurrent.futures.Future, started: float) -> None:
        with self._lock:
            if entry.inflight is done:
                entry.inflight = None
            if done.exception() is None and (entry.fetched_at is None
                                             or started > entry.fetched_at):
                entry.value, entry.fetched_at = done.result(), started
        if done.exception() is not None:
            _log.debug('cache refresh failed: %s', done.exception())


@dataclasses.dataclass
class _ServeCaches:
    """The executable body of a cacher node: one courier server per cache."""

    upstream: CourierHandle
    addresses: list[Address]
    refresh_s: float
    stale_s: float
    server_kwargs: dict

    def __call__(self, context: ExecutionContext) -> None:
        servers = []
        try:
            # Bound first: the upstream's address may come later (late binding), and a
            # cacher of a cacher must not wait for itself.
            caches = [_UnderConstruction(context.label) for _ in self.addresses]
            for address, cache in zip(self.addresses, caches):
                servers.append(start_server(cache, address, context, self.server_kwargs))
            context.report_ready()
            for cache, server in zip(caches, servers):
                built = Cache(self.upstream.dereference(), self.refresh_s, self.stale_s)
                server.replace_object(built)  # As CourierNode does: no stand-in per call.
                cache.finish(built)
            context.stop_event.wait()
        finally:
            for server in servers:
                server.stop()


class CacherHandle(Handle[courier.Client]):
    """Dereferences to a client of one of the node's caches, like the cached node's handle.

    With several caches, node ``i`` of a group uses cache ``i % num_caches``.
    """

    def __init__(self, addresses: list[Address], client_kwargs: dict):
        self._addresses = list(addresses)
        self._client_kwargs = dict(client_kwargs)

    def dereference(self) -> courier.Client:
        try:
            choice = runtime.get_node_context().index % len(self._addresses)
        except NotRunningError:  # The launching process, or a thread of its own.
            choice = random.randrange(len(self._addresses))
        address = self._addresses[choice]
        return courier.Client(address.resolve(), server_identity=address.identity,
                              relocate=address.relocate,
                              **self._client_kwargs)  # type: ignore[return-value]


def _positive_ms(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f'CacherNode {name} must be a positive number of milliseconds '
                         f'(got {value!r})')
    return value / 1000


class CacherNode(Node):
    """Caches the answers of the courier node behind ``handle``.

    A call with the same method and arguments within ``refresh_interval_ms`` of
    the last fetch is answered from memory; an older answer is still returned
    but refreshed in the background; an answer older than ``stale_after_ms`` is
    never returned (the caller waits for a fresh one). ``num_caches`` serves
    that many independent caches from the node's process.
    """

    def __init__(self, handle: CourierHandle, refresh_interval_ms: float = 1000,
                 stale_after_ms: float = 10000, num_caches: int = 1, *,
                 courier_kwargs: dict | None = None,
                 courier_client_kwargs: dict | None = None):
        super().__init__()
        if not isinstance(handle, CourierHandle):
            raise TypeError('CacherNode caches a courier node: pass the handle returned by '
                            f'add_node(lp.CourierNode(...)) (got {handle!r})')
        self._refresh_s = _positive_ms('refresh_interval_ms', refresh_interval_ms)
        self._stale_s = _positive_ms('stale_after_ms', stale_after_ms)
        if self._stale_s < self._refresh_s:
            raise ValueError(f'CacherNode stale_after_ms ({stale_after_ms}) must be at least '
                             f'refresh_interval_ms ({refresh_interval_ms})')
        if isinstance(num_caches, bool) or not isinstance(num_caches, int) or num_caches < 1:
            raise ValueError(f'CacherNode num_caches must be a positive int (got {num_caches!r})')
        self._upstream = handle
        self._server_kwargs = dict(courier_kwargs or {})
        self._client_kwargs = dict(courier_client_kwargs or {})
        for i in range(num_caches):
            self._new_address(f'cache{i}')

    def _target_name(self) -> str:
        return 'Cacher'

    def arguments(self) -> Iterator[tuple[str, Any]]:
        yield 'handle', self._upstream

    def create_handle(self) -> CacherHandle:
        return CacherHandle(self._addresses, self._client_kwargs)

    def to_executables(self) -> list[Executable]:
        body = _ServeCaches(self._upstream, self.addresses, self._refresh_s, self._stale_s,
                            self._server_kwargs)
        return [Executable(self.label, self.index, self.description, body, self.addresses)]
