"""Address placeholders: where a node's server listens, known once it has bound.

A node creates its ``Address`` when it is made; handles to the node hold the
same object, and it travels with them in pickles. No port is chosen in
advance (a pre-picked port races with the ephemeral ports of the launch's own
connections, and at a few hundred nodes they collide): a node's server binds
port 0, or the port the user fixed with ``assign``, and ``bound`` records
what it got. Every process keeps what it knows in one ``Directory``; an
address with no fixed value resolves there, and a node process asks its
launcher for what it lacks (late binding; see ``launchers/local``).

    address.port_to_bind()             # 0, or the fixed port, or the port it had before
    address.bound('127.0.0.1:41237')   # in the node, once its server listens
    address.resolve()                  # anywhere in the running program
"""

from __future__ import annotations

import abc
import functools
import os
import threading
import time
from typing import Callable, Iterable

import portpicker

from launchpad_py import errors
from launchpad_py.courier import client as courier_client
from launchpad_py.courier import fail_fast as courier_fail_fast


class AbstractAddressBuilder(abc.ABC):
    """Produces the ``host:port`` an address is bound to."""

    @abc.abstractmethod
    def build(self) -> str:
        """Returns a concrete address."""


class SimpleLocalAddressBuilder(AbstractAddressBuilder):
    """A free loopback port of this machine (to fix an address by hand; launchers do not)."""

    def build(self) -> str:
        return f'127.0.0.1:{portpicker.pick_unused_port()}'


class Directory:
    """What this process knows of the running programs' addresses: key -> ``host:port``.

    The launching process fills it as its nodes report (and expects the keys of
    nodes still starting, so a lookup waits for them); a node process fills it
    from its launcher's answers, asking through ``ask`` for every unresolved
    address it holds at once, so a node with a thousand handles asks once.
    """

    def __init__(self):
        self._values: dict[str, str] = {}
        self._keys_of: dict[str, str] = {}  # Every value a key had -> the key.
        self._expected: set[str] = set()
        self._gone: dict[str, str] = {}  # Key -> why it will never be known.
        self._held: set[str] = set()     # Keys of unresolved addresses unpickled here.
        self._asked: set[str] = set()
        self._relocating: set[str] = set()  # Keys asked again after a failed call (node side).
        self._down: set[str] = set()  # Keys whose node is down: relocations wait for it.
        self._final: set[str] = set()  # Keys of a stopping program: nothing moves any more.
        # The value of a node that left for good -> (its key, the end of the courier rule
        # that calls there fail fast): see ``retire``.
        self._left: dict[str, tuple[str, Callable[[], None]]] = {}
        self._changed = threading.Condition()
        #: Called with ``{key: (value, why)}`` after each ``retire`` that names new
        #: addresses: a process colocation passes it on to its children.
        self.retired_listeners: list[Callable[[dict[str, tuple[str, str]]], None]] = []
        # Addresses peers left for others, in the order told (a dict: a set that keeps it).
        self._moved: dict[str, None] = {}  # See ``moved_away``.
        #: Called with the new addresses of each ``moved_away``, as ``retired_listeners``.
        self.moved_listeners: list[Callable[[list[str]], None]] = []
        #: Set in a node process: sends a list of keys to its launcher, which answers
        #: through ``learn``/``give_up``.
        self.ask: Callable[[list[str]], None] | None = None
        #: Set in a node process: sends ``{key: stale value}`` to its launcher, which answers
        #: with where each server is now (see ``relocate``).
        self.ask_again: Callable[[dict[str, str]], None] | None = None

    def learn(self, values: dict[str, str]) -> None:
        with self._changed:
            self._values.update(values)
            self._keys_of.update((value, key) for key, value in values.items())
            self._relocating.difference_update(values)
            self._down.difference_update(values)
            # A new node may bind the port of one that left: calls to it wait again.
            reused = [self._left.pop(value)[1] for key, value in values.items()
                      if value in self._left and self._left[value][0] != key]
            self._changed.notify_all()
        for end in reused:
            end()

    def retire(self, values: dict[str, str], why: str) -> None:
        """The node whose addresses are ``values`` (key -> 'host:port') left for good (its
        elastic group shrank): relocations raise ``why`` at once, and a call there that
        cannot connect fails with ``why`` instead of waiting for a server that will never
        come back (a restarting node is withdrawn instead, and waited for)."""
        with self._changed:
            fresh = {key: value for key, value in values.items() if value not in self._left}
            if not fresh:
                return
            end = courier_fail_fast.fail_fast_on_unavailable(fresh.values(), why)
            for key, value in fresh.items():
                self._gone[key] = why
                self._left[value] = (key, end)
                self._down.discard(key)
            self._changed.notify_all()
        for listener in list(self.retired_listeners):
            listener({key: (value, why) for key, value in fresh.items()})

    def moved_away(self, values: Iterable[str]) -> None:
        """Peers left these addresses ('host:port') for others: a node restarted as a new pod
        serves at a new IP, and its old one may not even refuse connections. Calls waiting
        there fail at once (``CourierUnavailableError``), so their clients ask where it went
        (``relocate``)."""
        with self._changed:
            fresh = [value for value in dict.fromkeys(values) if value not in self._moved]
            self._moved.update(dict.fromkeys(fresh))
        if fresh:
            courier_fail_fast.fail_fast_on_unavailable(fresh)
            for listener in list(self.moved_listeners):
                listener(fresh)

    def moved(self) -> list[str]:
        """Every address here that peers left for others (``moved_away``)."""
        with self._changed:
            return list(self._moved)

    def left(self) -> dict[str, tuple[str, str]]:
        """Key -> (value, why) of every address here whose node left for good (``retire``)."""
        with self._changed:
            return {key: (value, self._gone[key]) for value, (key, _) in self._left.items()}

    def known(self, key: str) -> str | None:
        return self._values.get(key)

    def key_of(self, value: str) -> str | None:
        """The key of the address that is, or was, ``value`` (a string a client was made
        from); None if no program here had it."""
        return self._keys_of.get(value)

    def __len__(self) -> int:
        """How many addresses this process knows."""
        return len(self._values)

    def size(self) -> int:
        """How many keys this process keeps in all (known, expected, held, asked, ...): what a
        process that launches program after program must not see grow."""
        with self._changed:
            return sum(len(keys) for keys in (
                self._values, self._keys_of, self._expected, self._gone, self._held,
                self._asked, self._relocating, self._down, self._final, self._left))

    def keys(self) -> set[str]:
        """Every key this directory holds anything about: once a program is over, none of
        its keys may be among them (a process that launches program after program)."""
        with self._changed:
            return (set(self._values) | set(self._keys_of.values()) | self._expected
                    | set(self._gone) | self._held | self._asked | self._relocating
                    | self._down | self._final | {key for key, _ in self._left.values()})

    def expect(self, keys: Iterable[str]) -> None:
        """Keys that nodes of a program launched here will report: lookups wait for them."""
        with self._changed:
            for key in keys:
                self._expected.add(key)
                self._gone.pop(key, None)

    def give_up(self, keys: Iterable[str], why: str) -> None:
        """Lookups of ``keys`` still unknown fail with ``why`` (the program stopped)."""
        with self._changed:
            for key in keys:
                self._final.add(key)
                if key not in self._values or key in self._down:
                    self._gone[key] = why
                    self._expected.discard(key)
                    self._down.discard(key)
            self._changed.notify_all()

    def forget(self, keys: Iterable[str]) -> None:
        """The program is over: its addresses mean nothing any more."""
        with self._changed:
            forgotten = set(keys)
            self._keys_of = {v: k for v, k in self._keys_of.items() if k not in forgotten}
            for key in forgotten:
                self._values.pop(key, None)
                self._expected.discard(key)
                self._gone.pop(key, None)
                self._down.discard(key)
                self._final.discard(key)
            # Held and asked keys go too: a process that launches program after program
            # (unpickling each one's addresses) kept every key it ever held.
            self._held -= forgotten
            self._asked -= forgotten
            self._relocating -= forgotten
            left = [value for value, (key, _) in self._left.items() if key in forgotten]
            ends = [self._left.pop(value)[1] for value in left]
            self._changed.notify_all()  # A relocation waiting for one of them gives up.
        for end in ends:
            end()

    def tracks(self, key: str) -> bool:
        """Whether a launch in this process has this address (known, or waited for)."""
        with self._changed:
            return key in self._values or key in self._expected

    def withdraw(self, keys: Iterable[str]) -> None:
        """The node behind ``keys`` is down (it may come back elsewhere): relocations wait
        for its next report; lookups still get the last value."""
        with self._changed:
            self._down.update(keys)
            self._changed.notify_all()

    def is_down(self, key: str) -> bool:
        with self._changed:
            return key in self._down

    def relocate(self, key: str, stale: str, grace: float = 2.0) -> str:
        """Where the server of ``key`` is now, after a call to it at ``stale`` failed.

        A restarted node may bind another port or host, so a client whose call
        failed asks again. In a node process the launcher answers (once the node
        is back, if it is down). In the launching process the value is the
        book's: a value other than ``stale`` is returned at once; one whose node
        is down (withdrawn) is waited for; ``stale`` itself is returned once
        ``grace`` seconds passed without news (the failure was not the node's
        end: the same server is still there).
        """
        if self.ask_again is not None:
            return self._ask_launcher_again(key, stale)
        deadline = time.monotonic() + grace
        with self._changed:
            while True:
                value = self._values.get(key)
                if key in self._gone:
                    raise errors.NotRunningError(
                        f'the server at {stale} is gone: {self._gone[key]}')
                down = key in self._down
                if value is not None and not down and (
                        value != stale or key in self._final or time.monotonic() >= deadline):
                    return value  # (A stopping program's nodes come back nowhere: no grace.)
                if value is None and key not in self._expected:
                    raise errors.NotRunningError(f'the server at {stale} is not a node of a '
                                                 'running program')
                self._changed.wait(None if down or value is None
                                   else max(deadline - time.monotonic(), 0.0))

    def _ask_launcher_again(self, key: str, stale: str) -> str:
        with self._changed:
            if key in self._gone:  # Left for good (``retire``): nothing to ask.
                raise errors.NotRunningError(f'the server at {stale} is gone: {self._gone[key]}')
            first = key not in self._relocating
            self._relocating.add(key)
            if self._values.get(key) == stale:  # Lookups meanwhile wait for the answer.
                del self._values[key]
        if first:
            self.ask_again({key: stale})
        with self._changed:
            self._changed.wait_for(lambda: key not in self._relocating or key in self._gone)
            self._relocating.discard(key)
            if key in self._values:
                return self._values[key]
            raise errors.NotRunningError(f'the server at {stale} is gone: {self._gone[key]}')

    def hold(self, key: str) -> None:
        with self._changed:
            self._held.add(key)

    def lookup(self, address: 'Address') -> str:
        """The value of ``address``, waiting for it (asking the launcher) when it is to come."""
        return self.lookup_key(address.key, address.owner)

    def lookup_key(self, key: str, owner: str) -> str:
        with self._changed:
            if key in self._values:
                return self._values[key]
            if key not in self._expected and self.ask is None:
                raise errors.NotRunningError(
                    f'the address of {owner} is not assigned: handles can only be dereferenced '
                    'inside a running program; launch it with lp.launch(program) and use the '
                    'handle inside a node')
            wanted = []
            if self.ask is not None and key not in self._asked:
                wanted = sorted((self._held | {key}) - self._asked - set(self._values))
                self._asked.update(wanted)
        if wanted:
            self.ask(wanted)
        with self._changed:
            self._changed.wait_for(lambda: key in self._values or key in self._gone)
            if key in self._values:
                return self._values[key]
            raise errors.NotRunningError(f'the address of {owner} is unknown: {self._gone[key]}')


#: This process's directory.
directory = Directory()


def _relocate_key(key: str, stale: str) -> str:
    """``relocate`` for a client made from a string that was address ``key``'s value."""
    if directory.ask_again is None and not directory.tracks(key):
        return stale  # Its program is over, or was never launched here: nothing to follow.
    return directory.relocate(key, stale)


def _follower(value: str) -> Callable[[str], str] | None:
    key = directory.key_of(value)
    return functools.partial(_relocate_key, key) if key is not None else None


courier_client.follow_known_addresses(_follower)


class Address:
    """A placeholder for a server address, resolved only in a running program."""

    def __init__(self, name: str = 'default'):
        self.name = name
        self.owner = 'a node'  # Set by the node, for error messages.
        self.key = os.urandom(8).hex()  # Names it in directories, across processes.
        # The name its server proves and its clients expect ('label/index'), set when the
        # node joins a program: a proof made for one node is worthless at another.
        self.identity: str | None = None
        self._value: str | None = None

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if self._value is None:  # One question to the launcher covers all we hold.
            directory.hold(self.key)

    def assign(self, value: str) -> None:
        """Fixes the address: the node binds this port, wherever it is launched."""
        if not isinstance(value, str) or ':' not in value:
            raise errors.ProgramError(f"address of {self.owner} must be 'host:port' (got {value!r})")
        get_port_from_address(value)
        self._value = value

    def bind(self, builder: AbstractAddressBuilder) -> None:
        self.assign(builder.build())

    def unbind(self) -> None:
        self._value = None

    def renew(self) -> None:
        """A new identity with no value (a copy of a node gets an address of its own)."""
        self._value = None
        self.key = os.urandom(8).hex()

    @property
    def is_assigned(self) -> bool:
        """Whether the address is fixed (by the user, or by a launcher that places nodes)."""
        return self._value is not None

    def port_to_bind(self) -> int:
        """The port a node's server binds: the fixed one, the one it had before a restart,
        or 0 (the kernel picks a free one)."""
        value = self.known()
        return get_port_from_address(value) if value else 0

    def bound(self, value: str) -> None:
        """The node's server listens at ``value``: this process knows it from now on."""
        directory.learn({self.key: value})

    def resolve(self) -> str:
        if self._value is not None:
            return self._value
        return directory.lookup(self)

    def relocate(self, stale: str) -> str:
        """Where the server is now, after a call to it at ``stale`` failed (a client's
        ``relocate``): a restarted node may have come back on another port or host."""
        if directory.ask_again is None and not directory.tracks(self.key) \
                and self._value is not None:
            return self._value  # Fixed, and no launcher here knows of it: it never moves.
        return directory.relocate(self.key, stale)

    def known(self) -> str | None:
        """The value if this process knows it now (never waits)."""
        return self._value or directory.known(self.key)

    def __repr__(self) -> str:
        return f'Address({self.owner}, {self.known() or "unbound"})'


def get_port_from_address(address: str) -> int:
    """The port of ``'host:port'`` (IPv6 ``'[::1]:port'`` too)."""
    host, sep, port = address.rpartition(':')
    if not sep or not port.isdigit():
        raise ValueError(f"expected an address 'host:port' (got {address!r})")
    return int(port)
