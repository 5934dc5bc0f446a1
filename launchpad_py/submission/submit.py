"""``lp.submit``: start a program whose controller runs where the program does, then return.

    program = lp.submit('train.py', '--steps=1000', launch_type='slurm',
                        sbatch_args=['--ntasks=4', '--time=2:00:00'])
    program = lp.submit(p, launch_type='ssh', host='gpu-box')   # an lp.Program, pickled
    print(program.id)   # `python -m launchpad_py logs <id> -f` from any terminal

A script runs as ``python script.py args`` would, in the same working
directory; its ``lp.launch(p)`` defaults to ``program_launch_type`` ('slurm'
under Slurm). A program object is pickled with cloudpickle and launched with
``launch_kwargs``. The program's secret is made here, kept for the user (0600)
and handed to the controller in a file or over ssh's stdin.
"""

from __future__ import annotations

import base64
import os
import secrets
import shutil
import sys
import time

import cloudpickle

from launchpad_py import errors
from launchpad_py.program import Program
from launchpad_py.submission import records, slurm, ssh
from launchpad_py.submission.submitted import PLATFORMS, SubmittedProgram


def submit(target, *args: str, launch_type: str = 'slurm', host: str | None = None,
           ssh_options: list[str] | None = None, sbatch_args: list[str] | None = None,
           program_launch_type: str | None = None, name: str | None = None,
           requeue: bool = False, signal_s: int | None = None,
           **launch_kwargs) -> SubmittedProgram:
    """Submits ``target`` (a script path or an ``lp.Program``); returns its handle.

    ``requeue`` (slurm): the job may be requeued (preemption, ``scontrol requeue``, and with
    ``signal_s`` its time limit: Slurm warns the controller that many seconds ahead and it
    requeues the job); the program then starts again in the new allocation and its nodes
    resume from their checkpoints (``lp.checkpoint_dir()``, kept in the program's directory).
    """
    requeue_args = _requeue_args(launch_type, requeue, signal_s)
    if launch_type not in PLATFORMS:
        raise errors.ProgramError(f'lp.submit cannot submit to launch_type {launch_type!r}; '
                                  f'choose one of {", ".join(sorted(PLATFORMS))}')
    if launch_type == 'ssh' and not host:
        raise errors.ProgramError("lp.submit(..., launch_type='ssh') needs host= (the host "
                                  'the controller runs on, e.g. a name of your ssh config)')
    record = {'launcher': launch_type, 'host': host, 'ssh_options': list(ssh_options or []),
              'sbatch_args': list(sbatch_args or []) + requeue_args, 'cwd': os.getcwd(),
              'requeue': requeue, 'signal_s': signal_s,
              'python': sys.executable, 'started': time.time(),
              'program_launch_type': program_launch_type or
              ('slurm' if launch_type == 'slurm' else None)}
    pickled = _describe(target, args, record, name, launch_kwargs)
    record['id'] = records.new_id(record['name'])
    secret = secrets.token_bytes(32)
    record['dir'] = records.create(record, secret)
    try:
        if pickled is not None:
            records.write_private(os.path.join(record['dir'], records.PROGRAM), pickled)
        if launch_type == 'slurm':
            record.update(slurm.submit(record))
        else:
            record.update(ssh.submit(record, {
                'record': record, 'secret': secret.hex(),
                'program': pickled and base64.b64encode(pickled).decode()}))
    except BaseException:
        shutil.rmtree(record['dir'], ignore_errors=True)
        raise
    records.save(record['dir'], record)
    return SubmittedProgram(record)


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
