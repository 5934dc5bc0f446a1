"""Group handles: a handle on a whole group that resolves to its live members.

    evaluators = p.group_handle('evaluator')          # at setup
    p.add_node(lp.PyClassNode(Evolver, evaluators), label='evolver')

    # inside the node, evaluators is a GroupMembers:
    clients = evaluators.clients()                    # one per live member, by index
    evaluators.wait_for_change(evaluators.version, timeout=5)

A member is live while it serves: from its 'ready' until it fails, is being
restarted or removed, or the program stops. The launcher's controller keeps
a table of the live members of every group that has a handle and applies it
in its own process. A node process gets a group's table only once it uses
that group's handle: its first use asks for it (``watch``, through ``ask``,
which the node's runtime sets), and every change follows. Sending each change
to every node cost O(N) messages of O(N) members per change, O(N³) bytes for
a launch of N members, for tables most nodes never read. ``publish`` is how a
table arrives. Members are given as their own handles, so a member of any
node type dereferences as it would from ``add_node``.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterator

from launchpad_py import errors
from launchpad_py.courier import serialization
from launchpad_py.program.handle import Handle

#: How long a node waits for its launcher's first table (it comes when the node connects).
FIRST_TABLE_TIMEOUT_S = 60.0

# token -> (version, [(member name, pickled member handle), ...])
Table = dict[str, tuple[int, list[tuple[str, bytes]]]]
_table: Table = {}
_changed = threading.Condition()
_subscribers: list[Callable[[Table], None]] = []
#: How a node process asks its launcher for a group's table (None: the launching process,
#: and threads of it, which are given every table).
ask: Callable[[str], None] | None = None
_asked: set[str] = set()


def watch(token: str) -> None:
    """Makes sure the table of group ``token`` comes to this process and follows changes."""
    with _changed:
        asker = ask
        if asker is None or token in _table or token in _asked:
            return
        _asked.add(token)
    asker(token)


def publish(table: Table) -> None:
    """Takes the entries of ``table`` that are newer than ours; tells subscribers."""
    with _changed:
        newer = {token: entry for token, entry in table.items()
                 if token not in _table or _table[token][0] < entry[0]}
        if not newer:
            return
        _table.update(newer)
        _changed.notify_all()
        subscribers = list(_subscribers)
    for subscriber in subscribers:
        subscriber(newer)


def subscribe(subscriber: Callable[[Table], None]) -> Table:
    """Calls ``subscriber(newer_entries)`` on every change; returns the table as it is now."""
    with _changed:
        _subscribers.append(subscriber)
        return dict(_table)


def unsubscribe(subscriber: Callable[[Table], None]) -> None:
    with _changed:
        if subscriber in _subscribers:
            _subscribers.remove(subscriber)


class GroupHandle(Handle['GroupMembers']):
    """Made by ``Program.group_handle(label)``; dereferences to a ``GroupMembers``."""

    def __init__(self, label: str, token: str):
        self.label = label
        self.token = token

    def dereference(self) -> 'GroupMembers':
        return GroupMembers(self.label, self.token)

    def __repr__(self) -> str:
        return f'GroupHandle({self.label!r})'


class GroupMembers:
    """The live members of one group, read afresh on every use (see the module docstring)."""

    def __init__(self, label: str, token: str):
        self.label = label
        self._token = token
        self._values: dict[bytes, Any] = {}  # Dereferenced members, kept so clients are reused.
        self._lock = threading.Lock()

    def _entry(self) -> tuple[int, list[tuple[str, bytes]]]:
        watch(self._token)
        with _changed:
            if not _changed.wait_for(lambda: self._token in _table, FIRST_TABLE_TIMEOUT_S):
                raise errors.NotRunningError(
                    f'no member list of group {self.label!r} arrived within '
                    f'{FIRST_TABLE_TIMEOUT_S:.0f}s: a group handle works only inside a program '
                    'launched after the handle was made (and in its launching process)')
            return _table[self._token]

    @property
    def version(self) -> int:
        """Grows by one with every change of the members."""
        return self._entry()[0]

    def names(self) -> list[str]:
        """``'label/index'`` of each live member, by index."""
        return [name for name, _ in self._entry()[1]]

    def clients(self) -> list:
        """What each live member's own handle dereferences to (a courier client, for a
        ``CourierNode``), by index."""
        members = self._entry()[1]
        with self._lock:
            live = {data for _, data in members}
            for gone in [data for data in self._values if data not in live]:
                del self._values[gone]
            for _, data in members:
                if data not in self._values:
                    self._values[data] = serialization.loads(data).dereference()
            return [self._values[data] for _, data in members]

    def wait_for_change(self, version: int, timeout: float | None = None) -> int:
        """Blocks until the members differ from ``version`` (or ``timeout``); the version now."""
        self._entry()
        with _changed:
            _changed.wait_for(lambda: _table[self._token][0] != version, timeout)
            return _table[self._token][0]

    def __len__(self) -> int:
        return len(self._entry()[1])

    def __iter__(self) -> Iterator:
        return iter(self.clients())

    def __repr__(self) -> str:
        return f'GroupMembers({self.label!r}: {", ".join(self.names())})'
