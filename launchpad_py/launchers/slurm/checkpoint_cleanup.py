"""Removing a finished launch's private checkpoint directories from the job's hosts.

A node with no ``LAUNCHPAD_PY_CHECKPOINT_DIR`` checkpoints under a directory private to
its launch on its host (``node_side/checkpoints.py``), which no later launch can find.
With a step per host, each host's agent removes it as the program ends
(``HostAgent.close``); with a step per node, one last step per host of the job runs an
agent that does only that, before the allocation is given back.

    secret = SeenSecret()      # each node's step records it (launchers/remote/seen_secret.py)
    remove_on_hosts(job, 'my_program', secret.value, agent_command)
"""

from __future__ import annotations

import json
import logging
import os
import subprocess

from launchpad_py.launchers.slurm.job import COMMAND_TIMEOUT_S, Job, run
from launchpad_py.node_side import checkpoints

_log = logging.getLogger(__name__)


def remove_on_hosts(job: Job, program_name: str, secret: bytes | None,
                    agent_command: list[str]) -> None:
    """Runs one step per host of ``job`` whose agent removes the launch's private directory;
    nothing when the user gave a checkpoint root (those checkpoints are theirs) or no node
    started. A job already ended takes its steps nowhere: that is logged, not raised."""
    if os.environ.get(checkpoints.ROOT_ENV) or secret is None:
        return
    try:
        hosts = len(run(['scontrol', 'show', 'hostnames', job.node_list]).split())
        request = json.dumps({'remove_checkpoints': program_name, 'secret': secret.hex()})
        subprocess.run([*job.srun(None), f'--nodes={hosts}', f'--ntasks={hosts}',
                        '--ntasks-per-node=1', '--overlap', '--mem=0', '--gres=none',
                        '--job-name=lp-checkpoint-cleanup', *agent_command],
                       input=request.encode() + b'\n', capture_output=True, check=True,
                       timeout=COMMAND_TIMEOUT_S)
    except Exception as exc:  # The program is over either way; say what stayed behind.
        _log.warning('could not remove the private checkpoint directories of program %r from '
                     'the hosts of Slurm job %s: %s', program_name, job.job_id, exc)
