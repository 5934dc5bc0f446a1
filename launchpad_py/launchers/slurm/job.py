"""The one Slurm job a program runs in, and the ``srun`` step that starts each node there.

The job has one component per distinct group request (``Component``;
several make a heterogeneous job). From a login node the launcher holds a
new allocation (``slurm_allocation.Allocation``); inside one (an ``sbatch``
script, an interactive ``salloc``), ``ExistingAllocation`` puts the steps
into it. Either way ``scancel JOB`` ends the whole program.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import subprocess
import threading
import time

from launchpad_py import errors
from launchpad_py.launchers.slurm.resources import SlurmOptions, SlurmResources

COMMAND_TIMEOUT_S = 30
_ENDED_BY_SLURM = {'CANCELLED': 'was cancelled', 'TIMEOUT': 'reached its time limit',
                   'PREEMPTED': 'was preempted', 'NODE_FAIL': 'lost a node',
                   'DEADLINE': 'passed its deadline', 'BOOT_FAIL': 'could not boot its nodes'}
# Variables an allocation sets that srun would read as requests of its own.
_JOB_REQUEST_VARIABLES = ('SLURM_MEM_PER_NODE', 'SLURM_MEM_PER_CPU', 'SLURM_MEM_PER_GPU',
                          'SLURM_GPUS', 'SLURM_GPUS_PER_TASK', 'SLURM_GPUS_PER_NODE')


@dataclasses.dataclass(frozen=True)
class Component:
    """Nodes of the groups ``groups`` that all ask for ``spec``: one part of the job."""

    spec: SlurmResources
    tasks: int
    groups: tuple[str, ...]

    def salloc_args(self) -> list[str]:
        spec = self.spec
        args = [f'--ntasks={self.tasks}', f'--cpus-per-task={spec.cpus}']
        args += [f'--partition={spec.partition}'] if spec.partition else []
        args += [f'--mem-per-cpu={spec.mem_per_cpu()}M'] if spec.mem is not None else []
        return args + ([f'--gpus-per-task={spec.gpus}'] if spec.gpus else [])

    def describe(self) -> str:
        spec = self.spec
        return (f"groups {list(self.groups)}: {self.tasks} node(s) x {spec.cpus} CPU(s)"
                + (f', {spec.mem} memory' if spec.mem is not None else '')
                + (f', {spec.gpus} GPU(s)' if spec.gpus else '')
                + f" on partition {spec.partition or '(default)'}")


def components_of(specs: dict[str, SlurmResources], counts: dict[str, int]) -> list[Component]:
    """Groups that ask for the same resources share a component, in the program's group order."""
    by_request: dict[tuple, list[str]] = {}
    for label, spec in specs.items():
        if counts[label]:
            key = (spec.partition, spec.cpus, spec.gpus, spec.mem_per_cpu())
            by_request.setdefault(key, []).append(label)
    return [Component(specs[labels[0]], sum(counts[g] for g in labels), tuple(labels))
            for labels in by_request.values()]


def step_args(spec: SlurmResources) -> list[str]:
    """srun options that give one node what its group asks for, and only its own GPUs."""
    args = ['--ntasks=1', '--nodes=1', f'--cpus-per-task={spec.cpus}']
    args += [f'--mem-per-cpu={spec.mem_per_cpu()}M'] if spec.mem is not None else []
    return args + ([f'--gpus={spec.gpus}'] if spec.gpus else ['--gres=none'])


def run(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=True,
                              timeout=COMMAND_TIMEOUT_S).stdout
    except FileNotFoundError:
        raise errors.LaunchError(f'{argv[0]} is not installed here: the slurm launcher needs '
                                 "Slurm's client commands (apt-get install slurm-client)") from None
    except subprocess.CalledProcessError as exc:
        raise errors.LaunchError(f'{" ".join(argv)} failed: {exc.stderr.strip()}') from None


def address_towards(node_list: str) -> str:
    """This machine's address on the route to the first node of ``node_list`` (a Slurm hostlist)."""
    first = run(['scontrol', 'show', 'hostnames', node_list]).split()[0]
    found = re.search(r'\bNodeAddr=(\S+)', run(['scontrol', '-o', 'show', 'node', first]))
    target = found.group(1) if found else first
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as route:
        route.connect((target, 9))  # Picks a route; sends nothing.
        return route.getsockname()[0]


class Job:
    """A Slurm job that nodes run in as job steps."""

    def __init__(self, job_id: str, node_list: str):
        self.job_id, self.node_list = job_id, node_list
        self._verdict: str | None = None
        self._looked_at = -1e9
        self._lock = threading.Lock()

    def srun(self, component: int | None) -> list[str]:
        """The start of a node's srun command (``component``: its part of a heterogeneous job)."""
        unset = [f'--unset={name}' for name in _JOB_REQUEST_VARIABLES if name in os.environ]
        return (['env', *unset] if unset else []) + [
            'srun', f'--jobid={self.job_id}',
            *([f'--het-group={component}'] if component is not None else [])]

    def ended_by(self) -> str | None:
        """What Slurm did to the job, when it ended it ('Slurm job 7 was cancelled'); else None.

        Asked as each node ends; nodes ending together share one look.
        """
        with self._lock:
            if self._verdict is None and time.monotonic() - self._looked_at > 1.0:
                state = self._final_state()
                self._looked_at = time.monotonic()
                if state in _ENDED_BY_SLURM:
                    self._verdict = (f'Slurm job {self.job_id} {_ENDED_BY_SLURM[state]} '
                                     f'(JobState={state})')
            return self._verdict

    def _final_state(self) -> str | None:
        """The job's state; a job still COMPLETING (its steps being killed) is waited for."""
        deadline = time.monotonic() + COMMAND_TIMEOUT_S
        pause = threading.Event()
        while True:
            try:
                shown = run(['scontrol', '-o', 'show', 'job', self.job_id])
            except errors.LaunchError:
                return None  # Long gone from slurmctld's memory: not what ended a node now.
            state = re.search(r'\bJobState=(\w+)', shown)
            if not state or state.group(1) != 'COMPLETING' or time.monotonic() > deadline:
                return state and state.group(1)
            pause.wait(0.2)

    def release(self) -> None:
        """Gives the allocation back once the program is over (nothing when it is not ours)."""


class ExistingAllocation(Job):
    """The allocation the launcher runs in (``SLURM_JOB_ID`` is set): steps go there."""

    @classmethod
    def from_environment(cls, components: list[Component], options: SlurmOptions
                         ) -> 'ExistingAllocation':
        job_id = os.environ['SLURM_JOB_ID']
        for name in ('time', 'account', 'extra_args'):
            if getattr(options, name):
                raise errors.ResourcesError(
                    f'the launcher runs inside Slurm job {job_id}, whose allocation is already '
                    f'made, so slurm_options[{name!r}] cannot apply (got '
                    f'{getattr(options, name)!r}); give it to sbatch/salloc instead')
        partition = os.environ.get('SLURM_JOB_PARTITION')
        for component in components:
            if component.spec.partition not in (None, partition):
                raise errors.ResourcesError(
                    f'groups {list(component.groups)} ask for partition '
                    f'{component.spec.partition!r}, but the launcher runs inside Slurm job '
                    f'{job_id} on partition {partition!r}, whose resources its nodes share; '
                    'leave partition unset or submit to that partition')
        _check_capacity(job_id, components)
        return cls(job_id, os.environ.get('SLURM_JOB_NODELIST', ''))

    def srun(self, component: int | None) -> list[str]:
        return super().srun(None)  # One allocation: no components to choose from.


def _check_capacity(job_id: str, components: list[Component]) -> None:
    """Fails when the allocation has fewer CPUs than the nodes ask for (steps would wait forever)."""
    cpus_per_node = os.environ.get('SLURM_JOB_CPUS_PER_NODE', '')
    have = 0
    for part in filter(None, cpus_per_node.split(',')):
        count, _, repeat = part.partition('(x')
        have += int(count) * int(repeat.rstrip(')') or 1)
    need = sum(c.tasks * c.spec.cpus for c in components)
    if have and need > have:
        raise errors.ResourcesError(
            f'the program needs {need} CPUs (' + '; '.join(c.describe() for c in components)
            + f') but Slurm job {job_id}, which the launcher runs in, has {have} '
            f'(SLURM_JOB_CPUS_PER_NODE={cpus_per_node}); ask sbatch/salloc for more, e.g. '
            f'--ntasks={need}, or ask less of the groups')
