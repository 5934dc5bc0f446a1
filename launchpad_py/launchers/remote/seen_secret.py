"""The program's secret as the first node's bootstrap carried it, for cleanup after the end.

The launch's private checkpoint directory on a host is named after the program's secret
(``node_side/checkpoints.py``). The launcher's own copy stays inside the remote core, so a
backend that removes those directories once the program is over (``ray``, ``slurm``) keeps
the copy its starters see go by::

    seen = SeenSecret()
    seen.saw(boot)           # in each Starter.start; the first one counts
    seen.value               # None when no node ever started
"""

from __future__ import annotations

import threading


class SeenSecret:
    """The program's secret from the first bootstrap seen; starters may run on many threads."""

    def __init__(self) -> None:
        self.value: bytes | None = None
        self._lock = threading.Lock()

    def saw(self, boot: dict) -> None:
        with self._lock:
            if self.value is None:
                self.value = bytes.fromhex(boot['secret'])
