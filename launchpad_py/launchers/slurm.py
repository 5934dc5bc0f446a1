"""``launch_type='slurm'``: every node is a job step of one Slurm job; the scheduler picks hosts.

    lp.launch(p, launch_type='slurm', resources={
        'learner': lp.SlurmResources(partition='gpu', gpus=1, cpus=8, mem='32G'),
        'actor': lp.SlurmResources(partition='cpu', cpus=1, mem='2G'),
    }, slurm_options={'time': '02:00:00'})

This module only gets the job (``slurm_job``, ``slurm_allocation``) and builds each node's
``srun`` command; the node dials back and reports where it landed, and
starting, the address table, logs, stop and cleanup are ``remote.py``'s.
Each step's srun carries the node's stdin (the bootstrap with the program
secret, then kept open so a lost launcher ends the node) and its output.
"""

from __future__ import annotations

import os
import sys

from launchpad_py import errors
from launchpad_py.launchers import remote
from launchpad_py.launchers.controller import ProgramController
from launchpad_py.launchers.options import LaunchOptions
from launchpad_py.launchers.slurm_allocation import Allocation
from launchpad_py.launchers.slurm_job import (Component, ExistingAllocation, Job, address_towards,
                                              components_of, step_args)
from launchpad_py.launchers.slurm_resources import (SlurmOptions, SlurmResources,
                                                    resources_of_groups)
from launchpad_py.program import Program

_NODE_COMMAND = ['-m', 'launchpad_py.launchers.remote_node']


def _node_argv(job: Job, component: int | None, spec: SlurmResources, name: str) -> list[str]:
    env = {**remote.node_environment(), **(spec.env or {})}
    if not spec.gpus:  # Slurm leaves the launcher's CUDA_VISIBLE_DEVICES to a step without GPUs.
        env['CUDA_VISIBLE_DEVICES'] = ''
    return [*job.srun(component), *step_args(spec), f'--job-name={name}',
            'env', *(f'{k}={v}' for k, v in env.items()), sys.executable, *_NODE_COMMAND]


class SlurmStep(remote.CommandStarter):
    """A node's srun job step; when Slurm ends the job (scancel, time limit, preemption), says so."""

    def __init__(self, argv: list[str], job: Job):
        super().__init__(argv)
        self._job = job

    def taken_away(self) -> str | None:
        return self._job.ended_by()


def _get_job(program: Program, components: list[Component], options: SlurmOptions) -> Job:
    if os.environ.get('SLURM_JOB_ID'):
        return ExistingAllocation.from_environment(components, options)
    return Allocation.submit(program.name, components, options)


def _placements(program: Program, job: Job, components: list[Component],
                specs: dict[str, SlurmResources],
                launcher_ip: str) -> dict[tuple[str, int], remote.Placement]:
    het = len(components) > 1
    component_of = {label: index for index, c in enumerate(components) for label in c.groups}
    placements = {}
    for label, nodes in program.groups.items():
        for node in nodes:
            name = f'{label}/{node.index}'
            argv = _node_argv(job, component_of[label] if het else None, specs[label], name)
            placements[label, node.index] = remote.Placement(
                argv, f'job {job.job_id}', launcher_ip, starter=SlurmStep(argv, job),
                host_env='SLURMD_NODENAME')
    return placements


def _check_options(options: LaunchOptions) -> None:
    if options.serialize_py_nodes is False:
        raise errors.ProgramError('slurm always serializes nodes to ship them to their hosts; '
                                  'leave serialize_py_nodes unset')


def launch_slurm(program: Program, options: LaunchOptions) -> ProgramController:
    _check_options(options)
    # A new srun step may land on another host of the allocation, where the node could not
    # keep its address; nor is there a placement for a node added later (yet).
    options.reject_for('slurm', restarts=True, elastic_groups=program.elastic_groups)
    slurm = SlurmOptions.from_flags(options.launcher_options)
    specs = resources_of_groups(program.groups, dict(options.local_resources or {}), slurm)
    counts = {label: len(nodes) for label, nodes in program.groups.items()}
    components = components_of(specs, counts)
    if not components:
        raise errors.ProgramError(f'program {program.name!r} has no nodes to launch')
    job = _get_job(program, components, slurm)
    try:
        launcher_ip = slurm.launcher_address or address_towards(job.node_list)
        log_dir = os.path.abspath(os.path.join(slurm.output_dir, f'{program.name}-{job.job_id}'))
        os.makedirs(log_dir, exist_ok=True)
        print(f'launchpad_py: program {program.name!r} runs as Slurm job {job.job_id} '
              f'(nodes {job.node_list}); node logs in {log_dir}', flush=True)
        placements = _placements(program, job, components, specs, launcher_ip)
        return remote.launch(program, options, 'slurm', placements, log_dir=log_dir,
                             on_finish=job.release)
    except BaseException:
        job.release()  # Idempotent: a launch that fails after the start released it already.
        raise
