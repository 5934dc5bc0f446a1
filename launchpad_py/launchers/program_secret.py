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
from typing import Callable, Iterable

from launchpad_py import courier
from launchpad_py.program import Executable


def issue(executables: Iterable[Executable]) -> tuple[bytes, Callable[[], None]]:
    """A fresh secret registered for every address of ``executables``, and its undoing."""
    secret = secrets.token_bytes(32)
    addresses = [a.resolve() for e in executables for a in e.addresses]
    for address in addresses:
        courier.register_secret(address, secret)

    def forget() -> None:
        for address in addresses:
            courier.forget_secret(address)

    return secret, forget
