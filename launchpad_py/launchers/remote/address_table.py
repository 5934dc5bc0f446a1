"""The current address of every node of a remote launch, for nodes whose peer moved.

Remote nodes get their peers' addresses with their executable. A node that
comes back elsewhere (a restarted pod binds a new IP and port) leaves its
clients with a stale one: a client whose call was lost asks again
(``Address.relocate``, over the node's control channel), and this table
answers with the node's address once its new run has reported it, so the
client loses one call and then follows.

    table.learn({key: '10.1.2.3:4567'})   # a node reported (at launch, or after a restart)
    table.moving([key])                   # its node ended and comes back elsewhere: its
                                          # old addresses, which every process gives up
    table.ask([key], answer)              # answer(values, gone), maybe later
"""

from __future__ import annotations

import threading
from typing import Callable, Iterable

Answer = Callable[[dict[str, str], dict[str, str]], None]


class AddressTable:
    """Key -> ``host:port`` of one launch's nodes; questions about moving nodes wait."""

    def __init__(self):
        self._values: dict[str, str] = {}
        self._waiting: dict[str, list[Answer]] = {}
        self._closed: str | None = None
        self._lock = threading.Lock()

    def learn(self, values: dict[str, str]) -> None:
        """Nodes bound ``values``: answers whoever waited for them."""
        answers: dict[Answer, dict[str, str]] = {}
        with self._lock:
            self._values.update(values)
            for key, value in values.items():
                for answer in self._waiting.pop(key, ()):
                    answers.setdefault(answer, {})[key] = value
        for answer, found in answers.items():
            answer(found, {})

    report = learn  # What ``relay_node_messages`` calls with a ready node's addresses.

    def moving(self, keys: Iterable[str]) -> list[str]:
        """The node of ``keys`` ended and will report new addresses: questions wait for them.
        Returns the addresses it had."""
        with self._lock:
            return [old for old in (self._values.pop(key, None) for key in keys) if old]

    def ask(self, keys: list[str], answer: Answer) -> None:
        """Answers with the addresses known now, the rest once their nodes report."""
        values, gone = {}, {}
        with self._lock:
            for key in keys:
                if key in self._values:
                    values[key] = self._values[key]
                elif self._closed is not None:
                    gone[key] = self._closed
                else:
                    self._waiting.setdefault(key, []).append(answer)
        if values or gone:
            answer(values, gone)

    def close(self, why: str) -> None:
        """The program is over: questions still open are answered with ``why``."""
        with self._lock:
            self._closed = why
            waiting, self._waiting = self._waiting, {}
        for key, answers in waiting.items():
            for answer in answers:
                answer({}, {key: why})
