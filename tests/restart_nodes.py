"""Nodes for the restart and elastic-group tests; importable from node processes."""

from __future__ import annotations

import os
import threading
import time

import launchpad_py as lp
from launchpad_py import courier


class Member:
    """Says who it is; ``hold`` keeps a call in flight until the node dies (``holding``
    counts those that arrived)."""

    def __init__(self):
        self._holding = 0

    def who(self):
        context = lp.get_node_context()
        return {'name': f'{context.label}/{context.index}', 'pid': os.getpid()}

    def hold(self):
        self._holding += 1
        threading.Event().wait()

    def member_tables(self):
        """The groups whose member tables reached this node (it uses no group handle)."""
        from launchpad_py.program import group_handle
        return sorted(group_handle._table)

    def holding(self):
        return self._holding


class Watcher:
    """Reports what a group handle shows inside a node."""

    def __init__(self, members):
        self._members = members

    def members(self):
        return {'version': self._members.version, 'names': self._members.names(),
                'answers': [client.who()['name'] for client in self._members.clients()]}

    def wait_for_change(self, version, timeout):
        return self._members.wait_for_change(version, timeout)


class MemberCaller:
    """Keeps clients of a group's members (``take_clients``) and calls one later, reporting
    how the call ended and how long it took (``call_member``)."""

    def __init__(self, members):
        self._members = members
        self._clients = {}

    def take_clients(self):
        """A client of each live member, made now and not called yet; their names."""
        self._clients = dict(zip(self._members.names(), self._members.clients()))
        return sorted(self._clients)

    def call_member(self, name, how, deadline=None):
        """``who()`` on member ``name``'s client: 'sync' or 'future'; with ``deadline``, through
        a client of the same address with that call timeout."""
        client = self._clients[name]
        if deadline is not None:
            client = courier.Client(client.address, timeout=deadline)
        started = time.monotonic()
        try:
            value = client.who() if how == 'sync' else client.futures.who().result()
        except Exception as exc:
            return {'error': type(exc).__name__, 'message': str(exc),
                    'unavailable': isinstance(exc, courier.CourierUnavailableError),
                    'seconds': time.monotonic() - started}
        return {'value': value, 'seconds': time.monotonic() - started}


class AddressCaller:
    """Calls ``ping()`` at any address, reporting as ``MemberCaller.call_member`` does, with
    this process's id (a restarted process is a new one)."""

    def ping_at(self, address):
        started = time.monotonic()
        try:
            value = courier.Client(address).ping()
        except Exception as exc:
            return {'error': type(exc).__name__, 'message': str(exc),
                    'unavailable': isinstance(exc, courier.CourierUnavailableError),
                    'seconds': time.monotonic() - started}
        return {'value': value, 'seconds': time.monotonic() - started}

    def pid(self):
        return os.getpid()


def _record_start(path: str) -> int:
    """Appends this start's monotonic time to ``path``; how many starts came before."""
    with open(path, 'a') as log:
        log.write(f'{time.monotonic()}\n')
    with open(path) as log:
        return len(log.read().split()) - 1


def crash_first_times(path: str, crashes: int):
    """Fails its first ``crashes`` runs (counted in ``path``), then waits for the stop."""
    starts = _record_start(path)
    if starts < crashes:
        raise RuntimeError(f'crash {starts + 1} of {crashes}')
    lp.wait_for_stop()


def always_crash(path: str):
    """Records the moment it started, then fails."""
    _record_start(path)
    raise ValueError('always fails')


def ignore_stop():
    """Never looks at the stop request."""
    threading.Event().wait()


class Caller:
    """Calls a ``Member`` from inside a node: what a client in another node sees."""

    def __init__(self, member):
        self._member = member

    def who(self):
        """The member's pid, or 'unavailable' when the call failed so."""
        try:
            return self._member.who()['pid']
        except courier.CourierUnavailableError:
            return 'unavailable'

    def hold(self):
        """A call to the member kept in flight until the member dies."""
        try:
            return self._member.hold()
        except courier.CourierUnavailableError:
            return 'unavailable'
