"""Nodes for the checkpoint tests; importable from node processes."""

from __future__ import annotations

import json
import os

import launchpad_py as lp


class Tally:
    """A count kept in its checkpoint directory: saved on every ``add`` and by ``checkpoint()``
    before a planned stop, loaded when the node starts (a restart or a new launch).

    ``checkpoint()`` also notes whether the stop event was already set and which stop
    handlers had run: a checkpoint must see the node whole.
    """

    def __init__(self):
        self._path = os.path.join(lp.checkpoint_dir(), 'tally.json')
        self._count = 0
        if os.path.exists(self._path):
            with open(self._path) as f:
                self._count = json.load(f)['count']
        self._stopped_by_handler = False
        lp.register_stop_handler(self._on_stop)

    def _on_stop(self):
        self._stopped_by_handler = True

    def _save(self, **extra):
        temporary = self._path + '.tmp'
        with open(temporary, 'w') as f:
            json.dump({'count': self._count, **extra}, f)
        os.replace(temporary, self._path)

    def add(self, n):
        self._count += n
        self._save()
        return self._count

    def count(self):
        return self._count

    def where(self):
        return {'dir': lp.checkpoint_dir(), 'pid': os.getpid()}

    def checkpoint(self):
        self._save(by_hook=True, stop_event_set=lp.stop_event().is_set(),
                   stop_handler_ran=self._stopped_by_handler)
