"""Removing a finished launch's private checkpoint directories from the Ray hosts it used.

A node with no ``LAUNCHPAD_PY_CHECKPOINT_DIR`` checkpoints under a directory private to
its launch on its host (``node_side/checkpoints.py``), which no later launch can find.
As the program ends, one small Ray task pinned to each Ray node the launch's nodes ran
on (and still alive) removes it there, as the ssh and Slurm launchers' host agents do.

    visits = Visits()     # each node's start records where it ran (and the secret)
    remove_on_nodes(ray, visits, 'my_program')
"""

from __future__ import annotations

import logging
import os
import threading

from launchpad_py.launchers.ray.node_host import remove_private_checkpoints
from launchpad_py.launchers.remote.seen_secret import SeenSecret
from launchpad_py.node_side import checkpoints

#: How long the launcher waits for the removals as the program ends.
CLEANUP_TIMEOUT_S = 60.0
_log = logging.getLogger(__name__)


class Visits:
    """The Ray nodes a launch's nodes ran on, and the program's secret (which names the
    private directory), as the first node's bootstrap carried it."""

    def __init__(self) -> None:
        self.node_ids: set[str] = set()
        self.secret = SeenSecret()
        self._lock = threading.Lock()

    def placed(self, node_id: str) -> None:
        with self._lock:
            self.node_ids.add(node_id)


def remove_on_nodes(ray, visits: Visits, program_name: str) -> None:
    """Removes the launch's private checkpoint directory on every live Ray node it used;
    nothing when the user gave a checkpoint root (those checkpoints are theirs) or no node
    started. What cannot be removed is logged, not raised: the program is over either way."""
    if os.environ.get(checkpoints.ROOT_ENV) or visits.secret.value is None:
        return
    try:
        alive = {node['NodeID'] for node in ray.nodes() if node['Alive']}
        remover = ray.remote(num_cpus=0)(remove_private_checkpoints)
        strategies = ray.util.scheduling_strategies
        ray.get([remover.options(scheduling_strategy=strategies.NodeAffinitySchedulingStrategy(
                    node_id, soft=False)).remote(program_name, visits.secret.value)
                 for node_id in sorted(visits.node_ids & alive)], timeout=CLEANUP_TIMEOUT_S)
    except Exception as exc:
        _log.warning('could not remove the private checkpoint directories of program %r from '
                     'its Ray hosts: %s', program_name, exc)
