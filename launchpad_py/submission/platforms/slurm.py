"""Submitting to Slurm: an sbatch job whose batch step is the controller.

    job = submit(record)           # sbatch --parsable ...; the batch script runs controller_main
    state(record)                  # 'RUNNING', 'PENDING', ... or None once Slurm forgets the job
    cancel(record)                 # scancel: the fallback when the clean stop cannot be had

The script then calls ``lp.launch(p, launch_type='slurm')`` inside the job: the
Slurm launcher sees ``SLURM_JOB_ID`` and runs each node as a step of this job
(``launchers/slurm/job.ExistingAllocation``), so the job's size is sbatch's
(``--sbatch '--ntasks=4 --time=2:00:00'``). When the batch step ends, for
whatever reason, Slurm ends the job and every step in it. The program's
directory must be on storage the compute nodes share (the home directory is).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

from launchpad_py import errors
from launchpad_py.submission import records

_TIMEOUT_S = 60


def _run(argv: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, input=stdin, capture_output=True, text=True,
                              timeout=_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise errors.LaunchError(f'{argv[0]} failed: {exc}') from None


def submit(record: dict) -> dict:
    """Queues the job; returns the record's Slurm fields (``job_id``)."""
    directory = record['dir']
    script = ('#!/bin/sh\n'
              f'exec {shlex.quote(sys.executable)} -u -m launchpad_py.submission.controller_main '
              f'{shlex.quote(directory)}\n')
    argv = ['sbatch', '--parsable', f'--job-name={record["name"]}',
            f'--output={os.path.join(directory, records.LOG)}',
            f'--chdir={record["cwd"]}', *record.get('sbatch_args', [])]
    done = _run(argv, script)
    if done.returncode != 0:
        raise errors.LaunchError(f'sbatch refused program {record["name"]!r} '
                                 f'({shlex.join(argv)}): {done.stderr.strip()}')
    return {'job_id': done.stdout.strip().split(';')[0], 'where': 'Slurm job'}


def state(record: dict) -> str | None:
    """The job's state as squeue shows it; None when Slurm no longer lists it."""
    done = _run(['squeue', '-h', '-j', record['job_id'], '-o', '%T'])
    return done.stdout.strip() or None if done.returncode == 0 else None


def cancel(record: dict) -> None:
    done = _run(['scancel', record['job_id']])
    if done.returncode != 0:
        raise errors.LaunchError(f'scancel {record["job_id"]} failed: {done.stderr.strip()}')


def read(record: dict, name: str) -> str | None:
    """A file of the program's directory (shared storage), or None while there is none."""
    try:
        with open(os.path.join(record['dir'], name)) as source:
            return source.read()
    except FileNotFoundError:
        return None
