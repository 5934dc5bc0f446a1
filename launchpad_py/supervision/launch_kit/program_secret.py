"""The program secret: made once per launch, known to the launching process by address.

Every courier listener of the program checks it (see ``courier/auth.py``).
The launching process registers it for each node address (as the node reports it), so its own
clients (``handle.dereference()`` in the launching script) and the servers
of ``local_mt`` nodes, which live in this process, find it without touching
the process-wide default that other programs of this process may need.
Node processes get it through their 0600 spec file or inherited socket and
make it their process default.
"""

from __future__ import annotations

import secrets

from launchpad_py import courier


class Issued:
    """A program's secret and the addresses it is registered for in this process."""

    def __init__(self, secret: bytes):
        self.secret = secret
        self._addresses: list[str] = []

    def register(self, address: str) -> None:
        """Registers the secret for ``address`` (a node bound it: see ``address_book``)."""
        courier.register_secret(address, self.secret)
        self._addresses.append(address)

    def forget(self) -> None:
        for address in self._addresses:
            courier.forget_secret(address)


def issue() -> Issued:
    """A fresh secret, registered for each node's address as the node reports it."""
    return Issued(secrets.token_bytes(32))
