"""``launch_type='slurm'``: every node is a job step of one Slurm job; the scheduler picks hosts.

    lp.launch(p, launch_type='slurm', resources={
        'learner': lp.SlurmResources(partition='gpu', gpus=1, cpus=8, mem='32G'),
        'actor': lp.SlurmResources(partition='cpu', cpus=1, mem='2G'),
    }, slurm_options={'time': '02:00:00'})

This module only gets the job (``job``, ``allocation``) and builds each node's
``srun`` command; the node dials back and reports where it landed, and
starting, the address table, logs, stop and cleanup are ``launchers/remote/``'s.
Each step's srun carries the node's stdin (the bootstrap with the program
secret, then kept open so a lost launcher ends the node) and its output.
Nodes added to elastic groups are new steps in the job, within the room it
holds for them (``growth``).
"""

from __future__ import annotations

import os
import sys

from launchpad_py import errors
from launchpad_py.launchers.remote import launch as remote
from launchpad_py.launchers.remote.seen_secret import SeenSecret
from launchpad_py.supervision.controller import ProgramController
from launchpad_py.launchers.options import LaunchOptions
from launchpad_py.launchers.slurm import checkpoint_cleanup, growth, host_steps
from launchpad_py.launchers.slurm.allocation import Allocation
from launchpad_py.launchers.slurm.job import (Component, ExistingAllocation, Job, address_towards,
                                              components_of, step_args)
from launchpad_py.launchers.slurm.resources import SlurmOptions, SlurmResources, resources_of_groups
from launchpad_py.program import Program

_NODE_MODULE = 'launchpad_py.node_side.remote_node_main'
_AGENT_MODULE = 'launchpad_py.node_side.host_agent'
#: With steps='auto', programs of more nodes than this get a step per host.
_STEP_PER_NODE_UP_TO = 32


def _node_command(spec: SlurmResources, module: str = _NODE_MODULE) -> list[str]:
    """What a step's srun runs (the node process, or a host's agent), with the group's
    environment."""
    env = {**remote.node_environment(), **(spec.env or {})}
    if not spec.gpus:  # Slurm leaves the launcher's CUDA_VISIBLE_DEVICES to a step without GPUs.
        env['CUDA_VISIBLE_DEVICES'] = ''
    return ['env', *(f'{k}={v}' for k, v in env.items()), sys.executable, '-m', module]


def _steps_per_host(program: Program, components: list[Component], slurm: SlurmOptions) -> bool:
    """Whether each host gets one step (running its agent) rather than each node."""
    can = len(components) == 1 and not components[0].spec.gpus
    if slurm.steps == 'host' and program.elastic_groups:
        raise errors.ResourcesError(
            f"slurm_options['steps'] = 'host' cannot grow groups "
            f'{sorted(program.elastic_groups)} (a host\'s agent step holds its CPUs); use '
            "steps='node' (or 'auto'), whose nodes added later are steps of their own")
    can = can and not program.elastic_groups
    if slurm.steps == 'host' and not can:
        raise errors.ResourcesError(
            "slurm_options['steps'] = 'host' needs a job of one component without GPUs (a GPU "
            'needs a step of its own for Slurm to bind it); got ' +
            '; '.join(c.describe() for c in components) + ". Use steps='node'")
    if slurm.steps == 'auto':
        return can and len(program.get_all_nodes()) > _STEP_PER_NODE_UP_TO
    return slurm.steps == 'host'


class SlurmStep(remote.CommandStarter):
    """A node's srun job step; when Slurm ends the job (scancel, time limit, preemption), says so.

    A restart is a new step pinned to the host the node reported (``--nodelist``), so that it
    serves on its old address; the failed step's CPUs and memory there are free again. A
    step that ended with its host (Slurm reports the host down or failing, or took it out of
    the job, which ``--no-kill`` keeps running) was lost by ``node_failure``, not the node's
    fault: its restart is a step wherever the job still has room, at a new address.
    """

    def __init__(self, srun_args: list[str], command: list[str], job: Job,
                 host: str | None = None, counted: tuple[growth.Room, str] | None = None,
                 secret: SeenSecret | None = None):
        super().__init__([*srun_args, *([f'--nodelist={host}'] if host else []), *command])
        self._srun_args, self._command, self._job, self._host = srun_args, command, job, host
        self._counted = counted  # The room its group's steps share, and the group.
        self._secret = secret
        self._ran_on: str | None = None  # The host the node reported.
        self._ended_by_us = False
        self._failed: bool | None = None  # Whether its host failed, once asked.

    def again(self, host: str | None) -> 'SlurmStep':
        where = None if self.lost_by() == 'node_failure' else host or self._host
        return SlurmStep(self._srun_args, self._command, self._job, where, self._counted,
                         self._secret)

    def ran_on(self, host: str) -> None:
        self._ran_on = host

    def terminate(self) -> bool:
        self._ended_by_us = True
        return super().terminate()

    def lost_by(self) -> str | None:
        """'node_failure' when the step ended, not by the launcher, in a job still running,
        and Slurm reports its host failed or took it out of the job; asked once (the host may
        come back later, its nodes gone meanwhile)."""
        process = self._process
        if (self._failed is None and self._ran_on and not self._ended_by_us
                and process is not None and process.poll() is not None
                and self._job.ended_by() is None):
            self._failed = host_steps.host_failed(self._job, self._ran_on)
        return 'node_failure' if self._failed else None

    def host_gone(self) -> bool:
        return self.lost_by() == 'node_failure'

    def start(self, boot: dict, sink) -> None:
        if self._secret is not None:
            self._secret.saw(boot)
        if self._counted is not None:
            room, label = self._counted
            room.started(label)
        super().start(boot, sink)

    def wait(self) -> int | None:
        try:
            return super().wait()
        finally:
            if self._counted is not None:
                room, label = self._counted
                room.ended(label)

    def taken_away(self) -> str | None:
        return self._job.ended_by()


def _get_job(program: Program, components: list[Component], options: SlurmOptions) -> Job:
    if os.environ.get('SLURM_JOB_ID'):
        return ExistingAllocation.from_environment(components, options)
    return Allocation.submit(program.name, components, options)


def _step_placer(job: Job, components: list[Component], specs: dict[str, SlurmResources],
                 launcher_ip: str, room: growth.Room, secret: SeenSecret):
    """``place(label, index)``: the placement of one node as a step of its own."""
    het = len(components) > 1
    component_of = {label: index for index, c in enumerate(components) for label in c.groups}

    def place(label: str, index: int) -> remote.Placement:
        name = f'{label}/{index}'
        step = SlurmStep([*job.srun(component_of[label] if het else None),
                          *step_args(specs[label]), f'--job-name={name}'],
                         _node_command(specs[label]), job, counted=(room, label), secret=secret)
        return remote.Placement(step.argv, f'job {job.job_id}', launcher_ip, starter=step,
                                host_env='SLURMD_NODENAME')

    return place


def _check_options(options: LaunchOptions) -> None:
    if options.serialize_py_nodes is False:
        raise errors.ProgramError('slurm always serializes nodes to ship them to their hosts; '
                                  'leave serialize_py_nodes unset')


def launch_slurm(program: Program, options: LaunchOptions) -> ProgramController:
    _check_options(options)
    slurm = SlurmOptions.from_flags(options.launcher_options)
    specs = resources_of_groups(program.groups, dict(options.local_resources or {}), slurm)
    counts = growth.with_room({label: len(nodes) for label, nodes in program.groups.items()},
                              program.elastic_groups, slurm.elastic_room)
    components = components_of(specs, counts)
    if not components:
        raise errors.ProgramError(f'program {program.name!r} has no nodes to launch')
    per_host = _steps_per_host(program, components, slurm)  # Refused before submitting.
    job = _get_job(program, components, slurm)
    agents, place_new, secret = [], None, SeenSecret()
    try:
        launcher_ip = slurm.launcher_address or address_towards(job.node_list)
        log_dir = os.path.abspath(os.path.join(slurm.output_dir, f'{program.name}-{job.job_id}'))
        os.makedirs(log_dir, exist_ok=True)
        print(f'launchpad_py: program {program.name!r} runs as Slurm job {job.job_id} '
              f'(nodes {job.node_list}); node logs in {log_dir}', flush=True)
        if per_host:
            placements, agents = host_steps.place_by_host(
                program, job, specs, launcher_ip, lambda spec: _node_command(spec, _AGENT_MODULE))
        else:
            room = growth.Room(job.job_id, components, slurm.elastic_room)
            place = _step_placer(job, components, specs, launcher_ip, room, secret)
            placements = {(label, node.index): place(label, node.index)
                          for label, nodes in program.groups.items() for node in nodes}

            def place_new(label: str, index: int) -> remote.Placement:
                room.check(label, f'{label}/{index}')
                return place(label, index)

        def finish() -> None:
            for agent in agents:
                agent.close(program_over=program.name)
            if not agents:
                checkpoint_cleanup.remove_on_hosts(
                    job, program.name, secret.value,
                    _node_command(components[0].spec, _AGENT_MODULE))
            job.release()

        return remote.launch(program, options, 'slurm', placements, log_dir=log_dir,
                             on_finish=finish, place_new=place_new)
    except BaseException:
        for agent in agents:
            agent.close()
        job.release()  # Idempotent: a launch that fails after the start released it already.
        raise
