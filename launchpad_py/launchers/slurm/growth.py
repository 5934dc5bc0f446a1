"""Elastic groups under Slurm: nodes added while the program runs are new steps in its job.

Slurm grows no allocation, so the room is held from the start: ``elastic_room``
more nodes per elastic group (``SlurmOptions``) make the job's components that
many tasks larger. ``Room`` counts each component's live steps; a node added
when its component is full is refused at once, saying what to ask for, rather
than left as an srun that waits for CPUs nobody will free.

    room = Room(job_id, components, component_of)
    room.check(label, name)    # raises LaunchError when the group's component is full
    room.started(label) / room.ended(label)   # as each step starts and ends
"""

from __future__ import annotations

import threading

from launchpad_py import errors
from launchpad_py.launchers.slurm.job import Component


def with_room(counts: dict[str, int], elastic: set[str], room: int) -> dict[str, int]:
    """Nodes per group the job must hold: the elastic groups' with ``room`` more each."""
    return {label: count + (room if label in elastic else 0) for label, count in counts.items()}


class Room:
    """The tasks each component of a job holds, and how many of them run a node's step now."""

    def __init__(self, job_id: str, components: list[Component], elastic_room: int):
        self._job_id = job_id
        self._elastic_room = elastic_room
        self._of = {label: c for c in components for label in c.groups}
        self._live = {c.groups: 0 for c in components}
        self._promised = {c.groups: 0 for c in components}  # Checked, their steps not started.
        self._lock = threading.Lock()

    def check(self, label: str, name: str) -> None:
        """Promises node ``name`` of group ``label`` a task of its component, or refuses it
        when none is free."""
        component = self._of[label]
        with self._lock:
            if self._live[component.groups] + self._promised[component.groups] < component.tasks:
                self._promised[component.groups] += 1
                return
        raise errors.LaunchError(
            f'cannot add node {name}: Slurm job {self._job_id} has no room for it ('
            f'{component.describe()}; all {component.tasks} in use, elastic_room='
            f'{self._elastic_room}). Launch with room to grow: slurm_options={{"elastic_room": '
            f'{self._elastic_room + 1}}} or more (the job then holds as many more nodes of each '
            'elastic group, i.e. more --ntasks, each with --cpus-per-task of its group), or '
            'inside an sbatch/salloc allocation with that many more CPUs')

    def started(self, label: str) -> None:
        with self._lock:
            groups = self._of[label].groups
            self._live[groups] += 1
            self._promised[groups] = max(0, self._promised[groups] - 1)

    def ended(self, label: str) -> None:
        with self._lock:
            self._live[self._of[label].groups] -= 1
