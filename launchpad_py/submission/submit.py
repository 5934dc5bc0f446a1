"""``lp.submit``: start a program whose controller runs where the program does, then return.

    program = lp.submit('train.py', '--steps=1000', launch_type='slurm',
                        sbatch_args=['--ntasks=4', '--time=2:00:00'])
    program = lp.submit(p, launch_type='ssh', host='gpu-box')   # an lp.Program, pickled
    program = lp.submit('train.py', launch_type='kubernetes', controller_restarts=2,
                        kubernetes_options={'image': 'registry/team/agent:1.2'})
    print(program.id)   # `python -m launchpad_py logs <id> -f` from any terminal

A script runs as ``python script.py args`` would, in the same working
directory; its ``lp.launch(p)`` defaults to ``program_launch_type`` ('slurm'
under Slurm, 'kubernetes' on Kubernetes). A program object is pickled with cloudpickle and launched with
``launch_kwargs``. The program's secret is made here, kept for the user (0600)
and handed to the controller in a file or over ssh's stdin.
"""

from __future__ import annotations

import base64
import dataclasses
import os
import secrets
import shutil
import sys
import time

import cloudpickle

from launchpad_py import errors
from launchpad_py.program import Program
from launchpad_py.submission import records
from launchpad_py.submission.platforms import kubernetes, kubernetes_objects, slurm, ssh
from launchpad_py.submission.submitted import PLATFORMS, SubmittedProgram

_DEFAULT_PROGRAM_LAUNCH_TYPE = {'slurm': 'slurm', 'kubernetes': 'kubernetes'}


def submit(target, *args: str, launch_type: str = 'slurm', host: str | None = None,
           ssh_options: list[str] | None = None, sbatch_args: list[str] | None = None,
           program_launch_type: str | None = None, name: str | None = None,
           requeue: bool = False, signal_s: int | None = None, controller_restarts: int = 0,
           kubernetes_options: dict | None = None, dry_run: bool = False,
           **launch_kwargs) -> SubmittedProgram | list[dict]:
    """Submits ``target`` (a script path or an ``lp.Program``); returns its handle.

    ``requeue`` (slurm): the job may be requeued (preemption, ``scontrol requeue``, and with
    ``signal_s`` its time limit: Slurm warns the controller that many seconds ahead and it
    requeues the job); the program then starts again in the new allocation and its nodes
    resume from their checkpoints (``lp.checkpoint_dir()``, kept in the program's directory).
    ``controller_restarts`` (kubernetes, ssh): when the controller fails or dies, it is
    started again up to that many times (the Job's ``backoffLimit``; a supervising process
    on the host) and runs the program from the start: its nodes resume from checkpoints.
    ``kubernetes_options``: ``kubernetes_objects.SubmitOptions`` (``image`` is required).
    ``dry_run`` (kubernetes): returns the objects it would apply, and applies nothing.
    """
    requeue_args = _requeue_args(launch_type, requeue, signal_s)
    _check_restarts(launch_type, controller_restarts)
    if (kubernetes_options is not None or dry_run) and launch_type != 'kubernetes':
        raise errors.ProgramError(f"lp.submit kubernetes_options and dry_run are for "
                                  f"launch_type='kubernetes' (got {launch_type!r})")
    if launch_type not in PLATFORMS:
        raise errors.ProgramError(f'lp.submit cannot submit to launch_type {launch_type!r}; '
                                  f'choose one of {", ".join(sorted(PLATFORMS))}')
    if launch_type == 'ssh' and not host:
        raise errors.ProgramError("lp.submit(..., launch_type='ssh') needs host= (the host "
                                  'the controller runs on, e.g. a name of your ssh config)')
    record = {'launcher': launch_type, 'host': host, 'ssh_options': list(ssh_options or []),
              'sbatch_args': list(sbatch_args or []) + requeue_args, 'cwd': os.getcwd(),
              'requeue': requeue, 'signal_s': signal_s, 'controller_restarts': controller_restarts,
              'python': sys.executable, 'started': time.time(),
              'program_launch_type': program_launch_type or
              _DEFAULT_PROGRAM_LAUNCH_TYPE.get(launch_type)}
    if launch_type == 'kubernetes':
        options = kubernetes_objects.SubmitOptions.from_mapping(kubernetes_options)
        record['kubernetes_options'] = dataclasses.asdict(options)
        if isinstance(target, Program) and record['program_launch_type'] == 'kubernetes':
            # Its pods go where the controller's rights are: the controller's namespace.
            launch_kwargs['kubernetes_options'] = {
                'namespace': options.namespace, **(launch_kwargs.get('kubernetes_options') or {})}
    pickled = _describe(target, args, record, name, launch_kwargs)
    record['id'] = records.new_id(record['name'])
    if launch_type == 'kubernetes':
        record['job'] = kubernetes_objects.job_name(record['id'])
        if dry_run:
            return kubernetes.render(record, pickled)
    secret = secrets.token_bytes(32)
    record['dir'] = records.create(record, secret)
    try:
        if pickled is not None:
            records.write_private(os.path.join(record['dir'], records.PROGRAM), pickled)
        if launch_type == 'slurm':
            record.update(slurm.submit(record))
        elif launch_type == 'kubernetes':
            record.update(kubernetes.submit(record, secret, pickled))
        else:
            record.update(ssh.submit(record, {
                'record': record, 'secret': secret.hex(),
                'program': pickled and base64.b64encode(pickled).decode()}))
    except BaseException:
        shutil.rmtree(record['dir'], ignore_errors=True)
        raise
    records.save(record['dir'], record)
    return SubmittedProgram(record)


def _check_restarts(launch_type: str, restarts) -> None:
    if isinstance(restarts, bool) or not isinstance(restarts, int) or restarts < 0:
        raise errors.ProgramError(f'lp.submit controller_restarts must be a whole number, 0 or '
                                  f'more (got {restarts!r})')
    if restarts and launch_type not in ('kubernetes', 'ssh'):
        raise errors.ProgramError(
            f"lp.submit controller_restarts is for launch_type 'kubernetes' or 'ssh' (got "
            f"{launch_type!r}; on Slurm, requeue=True has the scheduler start it again)")


def _requeue_args(launch_type: str, requeue: bool, signal_s: int | None) -> list[str]:
    """sbatch's arguments for ``requeue`` and ``signal_s``, checked."""
    if not isinstance(requeue, bool):
        raise errors.ProgramError(f'lp.submit requeue must be True or False (got {requeue!r})')
    if signal_s is not None and (isinstance(signal_s, bool) or not isinstance(signal_s, int)
                                 or signal_s < 1 or not requeue):
        raise errors.ProgramError(f'lp.submit signal_s must be seconds >= 1 before the time limit, '
                                  f'with requeue=True (got signal_s={signal_s!r}, '
                                  f'requeue={requeue!r})')
    if requeue and launch_type != 'slurm':
        raise errors.ProgramError(f"lp.submit requeue=True is for launch_type='slurm' "
                                  f'(got {launch_type!r})')
    if not requeue:
        return []
    # Append: a requeued job would truncate the log the first allocation wrote. USR2, not
    # USR1: NCCL takes USR1 in the processes it runs in.
    return ['--requeue', '--open-mode=append'] + (
        [f'--signal=B:USR2@{signal_s}'] if signal_s else [])


def _describe(target, args, record: dict, name: str | None, launch_kwargs: dict) -> bytes | None:
    """Fills the record's script or name; the pickled (program, launch kwargs), if a program."""
    if isinstance(target, Program):
        if args:
            raise errors.ProgramError(f'lp.submit of program {target.name!r} takes no script '
                                      f'arguments (got {args!r})')
        record['name'] = name or target.name
        kwargs = {'launch_type': record['program_launch_type'] or 'local_mp', **launch_kwargs}
        return cloudpickle.dumps((target, kwargs))
    if not isinstance(target, (str, os.PathLike)):
        raise TypeError(f'lp.submit takes a script path or an lp.Program (got {target!r})')
    if launch_kwargs:
        raise errors.ProgramError(f'lp.submit of script {target!r} takes no launch arguments '
                                  f'({sorted(launch_kwargs)}): the script calls lp.launch')
    script = os.path.abspath(target)
    if not os.path.isfile(script):
        raise FileNotFoundError(f'lp.submit: no script {target!r} (looked for {script})')
    record.update(script=script, args=[str(a) for a in args],
                  name=name or os.path.splitext(os.path.basename(script))[0])
    return None
