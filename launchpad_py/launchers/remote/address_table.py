"""The current address of every node of a remote launch, for nodes whose peer moved.

Remote nodes get their peers' addresses with their executable. A node that
comes back elsewhere (a restarted pod binds a new IP and port) leaves its
clients with a stale one: a client whose call was lost asks again
(``Address.relocate``, over the node's control channel), and this table
answers with the node's address once its new run has reported it, so the
client loses one call and then follows.

    table.learn({key: '10.1.2.3:4567'})   # a node reported (at launch, or after a restart)
    table.moving({key: '10.1.2.3:4567'})  # that run ended, the node comes back elsewhere:
                                          # its old addresses, which every process gives up
    table.ask([key], answer)              # answer(values, gone), maybe later
"""

from __future__ import annotations

import threading
from typing import Callable

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

    def moving(self, reported: dict[str, str]) -> list[str]:
        """The run of a node that had reported ``reported`` (key -> address) ended, and the
        node comes back elsewhere: questions wait for its next report, unless that came
        first (a deleted pod is started again before its old run's channel closes; its new
        addresses stay). Returns the addresses it had."""
        with self._lock:
            for key, old in reported.items():
                if self._values.get(key) == old:
                    del self._values[key]
        return [old for old in reported.values() if old]

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
