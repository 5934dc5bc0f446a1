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

Addresses may move: a node that ends unfinished is withdrawn (relocations
wait) until it reports again, and a restart that could not bind its old port (taken
meanwhile) or runs on another host reports another value. The book then counts
a new version of that address (``version``), and a client whose call failed
asks again (``relocate``) and gets the new value.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Iterable

from launchpad_py import errors
from launchpad_py.program import Executable, address
from launchpad_py.supervision.launch_kit.program_secret import Issued

_log = logging.getLogger(__name__)
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
        self._versions: dict[str, int] = {}   # Only addresses that moved: the rest are 1.
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
        with self._lock:
            before = {a.key: a.known() for a in executable.addresses}
        return {key: value for key, value in before.items() if value is not None}

    def version(self, key: str) -> int:
        """1 for an address as first bound, one more for every move since."""
        return self._versions.get(key, 1)

    def report(self, values: dict[str, str]) -> None:
        """A node bound ``values``; answers whoever waited for them."""
        if not values:
            return
        answers: dict[Answer, dict[str, str]] = {}
        with self._lock:
            self._keys.update(values)  # Fixed before the start (remote launches) too.
            for key, value in values.items():
                self._count_move(key, value)
                if value not in self._known_servers:  # Before anyone can learn it.
                    self._issued.register(value)
                    self._servers.append(value)
                    self._known_servers.add(value)
            address.directory.learn(values)
            for key, value in values.items():
                for answer in self._waiting.pop(key, ()):
                    answers.setdefault(answer, {})[key] = value
        for answer, found in answers.items():
            answer(found, {})

    def _count_move(self, key: str, value: str) -> None:
        """Call with the lock held, as ``key`` is reported at ``value``."""
        before = address.directory.known(key)
        if before is not None and before != value:
            self._versions[key] = self._versions.get(key, 1) + 1
            _log.info('address %s moved from %s to %s (version %d)', key, before, value,
                      self._versions[key])

    def withdraw(self, values: dict[str, str]) -> None:
        """The node that reported ``values`` is down: relocations wait until it reports again.

        Only addresses still at those values: a node's new run (a new pod) may report before
        its old run's end is seen, and that late end must not hide the new address (clients
        asking where the node went then waited for a report that had already come)."""
        with self._lock:
            if self._stopped:
                return
            current = [key for key, value in values.items()
                       if address.directory.known(key) == value]
            if current:
                address.directory.withdraw(current)

    def relocate(self, stale: dict[str, str], answer: Answer) -> None:
        """Where the servers of ``stale`` (key -> the value a call failed at) are now;
        ``answer`` gets each once known (see ``Directory.relocate``).

        A moved server is answered at once and a withdrawn one (its node is down) when it
        reports again, as ``ask`` does; only a server still shown at the failed value (its
        end not seen yet) takes a thread, for ``Directory.relocate``'s short grace.
        """
        now, gone = {}, {}
        with self._lock:
            for key, value in stale.items():
                current, down = address.directory.known(key), address.directory.is_down(key)
                if key not in self._keys:
                    gone[key] = self._why_unknown(key)
                elif current is not None and current != value and not down:
                    now[key] = current
                elif down and not self._stopped:
                    self._waiting.setdefault(key, []).append(answer)
                else:
                    threading.Thread(target=self._answer_relocation, args=(key, value, answer),
                                     name='lp-relocate', daemon=True).start()
        if now or gone:
            answer(now, gone)

    def _answer_relocation(self, key: str, stale: str, answer: Answer) -> None:
        try:
            answer({key: address.directory.relocate(key, stale)}, {})
        except errors.NotRunningError as exc:
            answer({}, {key: str(exc)})

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
