"""One launch's addresses, as its nodes report them (late binding, launching process's side).

No local launcher picks a port: each node's server binds port 0 (or the port
the user fixed), and the node reports what it bound when it reports ready.
The book then records it in this process's directory (so the launching
script and ``local_mt`` nodes resolve it), registers the program secret for
it, and answers the nodes that asked for it. A node asks only for the
addresses its handles reference, so each gets what its edges need, not the
whole table; an address not bound yet is answered when its node reports.

    book = AddressBook(program_name, keys, issued, servers)
    book.report({key: '127.0.0.1:41237'})           # a node is ready
    book.ask([key], answer)                         # answer(values, gone), maybe later
"""

from __future__ import annotations

import threading
from typing import Callable, Iterable

from launchpad_py.program import Executable, address
from launchpad_py.supervision.program_secret import Issued

Answer = Callable[[dict[str, str], dict[str, str]], None]


def late_keys(executables: Iterable[Executable]) -> list[str]:
    """Keys of the addresses nobody fixed: their nodes bind them and report."""
    return [a.key for e in executables for a in e.addresses if not a.is_assigned]


class AddressBook:
    """The addresses of one launch: reported by its nodes, asked for by its nodes."""

    def __init__(self, program_name: str, issued: Issued, servers: list[str]):
        self._program_name = program_name
        self._issued = issued
        self._servers = servers  # The scope's list: calls to them fail fast after a stop.
        self._known_servers = set(servers)  # Looked up per report: a list would be O(N) each.
        self._keys: set[str] = set()
        self._waiting: dict[str, list[Answer]] = {}
        self._stopped = False
        self._lock = threading.Lock()

    def expect(self, executables: Iterable[Executable]) -> None:
        """Nodes about to start (at launch, or added to an elastic group later)."""
        executables = list(executables)
        keys = late_keys(executables)
        with self._lock:
            self._keys.update(keys)
        address.directory.expect(keys)
        fixed = {a.key: a.resolve() for e in executables for a in e.addresses if a.is_assigned}
        self.report(fixed)

    def own(self, executable: Executable) -> dict[str, str]:
        """What a node's addresses were in its earlier run (a restart binds them again)."""
        return {a.key: a.known() for a in executable.addresses if a.known() is not None}

    def report(self, values: dict[str, str]) -> None:
        """A node bound ``values``; answers whoever waited for them."""
        if not values:
            return
        address.directory.learn(values)
        answers: dict[Answer, dict[str, str]] = {}
        with self._lock:
            for key, value in values.items():
                if value not in self._known_servers:
                    self._issued.register(value)
                    self._servers.append(value)
                    self._known_servers.add(value)
                for answer in self._waiting.pop(key, ()):
                    answers.setdefault(answer, {})[key] = value
        for answer, found in answers.items():
            answer(found, {})

    def ask(self, keys: list[str], answer: Answer) -> None:
        """Answers with what is known now, the rest as nodes report it."""
        values, gone = {}, {}
        with self._lock:
            for key in keys:
                value = address.directory.known(key)
                if value is not None:
                    values[key] = value
                elif key in self._keys and not self._stopped:
                    self._waiting.setdefault(key, []).append(answer)
                else:
                    gone[key] = self._why_unknown(key)
        if values or gone:
            answer(values, gone)

    def _why_unknown(self, key: str) -> str:
        if key in self._keys:
            return f'program {self._program_name!r} stopped before its node bound it'
        return f'it is no address of program {self._program_name!r} (a handle of another program?)'

    def stop(self) -> None:
        """The program stops: addresses not bound yet never will be."""
        with self._lock:
            self._stopped = True
            waiting, self._waiting = self._waiting, {}
            keys = set(self._keys)
        why = f'program {self._program_name!r} stopped before its node bound it'
        address.directory.give_up(keys, why)
        answers: dict[Answer, dict[str, str]] = {}
        for key, listeners in waiting.items():
            for answer in listeners:
                answers.setdefault(answer, {})[key] = why
        for answer, gone in answers.items():
            answer({}, gone)

    def finish(self) -> None:
        """The program is over: its addresses mean nothing in this process any more."""
        with self._lock:
            keys = set(self._keys)
        address.directory.forget(keys)
