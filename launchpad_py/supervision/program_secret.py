"""The program secret: made once per launch, known to the launching process by address.

Every courier listener of the program checks it (see ``courier/auth.py``).
The launching process registers it for each node address, so its own
clients (``handle.dereference()`` in the launching script) and the servers
of ``local_mt`` nodes, which live in this process, find it without touching
the process-wide default that other programs of this process may need.
Node processes get it through their 0600 spec file or inherited socket and
make it their process default.
"""

from __future__ import annotations

import secrets
from typing import Iterable

from launchpad_py import courier
from launchpad_py.program import Executable


class Issued:
    """A program's secret and the addresses it is registered for in this process."""

    def __init__(self, secret: bytes):
        self.secret = secret
        self._addresses: list[str] = []

    def cover(self, executables: Iterable[Executable]) -> None:
        """Registers the secret for the addresses of ``executables`` (nodes added later too)."""
        for executable in executables:
            for address in executable.addresses:
                courier.register_secret(address.resolve(), self.secret)
                self._addresses.append(address.resolve())

    def forget(self) -> None:
        for address in self._addresses:
            courier.forget_secret(address)


def issue(executables: Iterable[Executable]) -> Issued:
    """A fresh secret registered for every address of ``executables``."""
    issued = Issued(secrets.token_bytes(32))
    issued.cover(executables)
    return issued
