"""A Slurm job the launcher asks for from a login node and holds while the program runs.

``Allocation.submit`` runs salloc under a small watcher (``_hold.py``)
and returns once the job is granted, printing why while it is pending and
failing at once when Slurm refuses the request or can never run it. The
watcher gives the job back when the launcher is done or gone (SIGKILL too).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time

from launchpad_py import errors
from launchpad_py.launchers.slurm.job import COMMAND_TIMEOUT_S, Component, Job, run
from launchpad_py.launchers.slurm.resources import SlurmOptions

_HOLD = os.path.join(os.path.dirname(os.path.abspath(__file__)), '_hold.py')
_GRANTED = 'LPJOB '
# salloc's command: says the job id and nodes once granted (a heterogeneous job lists them per
# component), then holds the allocation until its stdin ends.
_HOLDER = ['sh', '-c', 'nodes=${SLURM_JOB_NODELIST:-$(env | sed -n '
           "'s/^SLURM_JOB_NODELIST_HET_GROUP_[0-9]*=//p' | paste -sd, -)}; "
           f'echo "{_GRANTED}$SLURM_JOB_ID $nodes"; exec cat >/dev/null']
_REPORT_EVERY_S = 30.0
_LOOK_EVERY_S = 1.0  # How often squeue is asked about a pending job.
# Pending reasons no waiting can cure: the request exceeds what the cluster is set up to give.
_HOPELESS = {'BadConstraints', 'PartitionConfig', 'PartitionNodeLimit', 'PartitionTimeLimit',
             'InvalidAccount', 'InvalidQOS', 'AccountNotAllowed', 'QOSNotAllowed'}


class Allocation(Job):
    """A job the launcher holds with salloc; it ends when the launcher is done or gone."""

    def __init__(self, process: subprocess.Popen, components: list[Component], program: str):
        super().__init__('', '')
        self._process, self._components, self._program = process, components, program
        self._granted = threading.Event()
        self._said: list[str] = []  # salloc's last words, for error messages.
        self._released = False
        self._readers = [threading.Thread(target=read, args=(stream,), name=f'lp-slurm-{program}',
                                          daemon=True)
                         for stream, read in ((process.stdout, self._read_grant),
                                              (process.stderr, self._read_salloc))]
        for reader in self._readers:
            reader.start()

    @classmethod
    def submit(cls, program: str, components: list[Component],
               options: SlurmOptions) -> 'Allocation':
        """Asks Slurm for the job; returns once it is granted, or raises saying why not."""
        # --no-kill: a host that fails takes its steps, not the job; the nodes it ran come
        # back on the job's other hosts (host_steps.AgentStep), lp.Restart allowing.
        argv = ['salloc', f'--job-name={program}', '--no-bell', '--no-kill']
        argv += [f'--time={options.time}'] if options.time else []
        argv += [f'--account={options.account}'] if options.account else []
        for index, component in enumerate(components):
            argv += ([':'] if index else []) + component.salloc_args() + list(options.extra_args)
        try:  # Its own session: Ctrl-C reaches the launcher only, which releases the job.
            process = subprocess.Popen([sys.executable, _HOLD, *argv, *_HOLDER],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True, start_new_session=True)
        except OSError as exc:
            raise errors.LaunchError(f'cannot run salloc for program {program!r}: {exc}') from None
        allocation = cls(process, components, program)
        try:
            allocation._wait_until_granted(options.pending_timeout)
        except BaseException:  # Ctrl-C included: a job we gave up on must not run later.
            allocation.release()
            raise
        return allocation

    def _read_grant(self, stream) -> None:
        for line in stream:
            if line.startswith(_GRANTED):
                self.job_id, _, self.node_list = line[len(_GRANTED):].strip().partition(' ')
                self._granted.set()
        stream.close()

    def _read_salloc(self, stream) -> None:
        for line in stream:
            self._said = (self._said + [line.rstrip()])[-10:]
            found = re.search(r'(?:Pending|Granted) job allocation (\d+)', line)
            if found and not self.job_id:
                self.job_id = found.group(1)
        stream.close()

    def _wait_until_granted(self, pending_timeout: float) -> None:
        start = time.monotonic()
        reported, reported_at, next_look = None, start, start + _LOOK_EVERY_S
        while not self._granted.wait(0.1):
            if self._process.poll() is not None:
                for reader in self._readers:  # salloc's last words, and a grant just made.
                    reader.join(5)
                if self._granted.is_set():
                    return
                raise errors.LaunchError(self._refused())
            if time.monotonic() < next_look:
                continue
            next_look = time.monotonic() + _LOOK_EVERY_S
            reason = self._pending_reason()
            waited = time.monotonic() - start
            if reason in _HOPELESS:
                raise errors.LaunchError(self._refused(f'it stays pending with reason {reason}, '
                                                       'which no waiting cures'))
            if pending_timeout and waited > pending_timeout:
                raise errors.LaunchError(self._refused(
                    f'still pending after {pending_timeout:.0f}s (reason {reason}); '
                    'the job was cancelled'))
            if reason and (reason != reported or time.monotonic() - reported_at >= _REPORT_EVERY_S):
                print(f'launchpad_py: Slurm job {self.job_id} of program {self._program!r} is '
                      f'pending ({reason}) after {waited:.0f}s; waiting for the scheduler '
                      '(Ctrl-C gives up)', flush=True)
                reported, reported_at = reason, time.monotonic()

    def _pending_reason(self) -> str | None:
        if not self.job_id:
            return None
        try:
            lines = run(['squeue', '-h', '-j', self.job_id, '-o', '%T %r']).split('\n')
        except errors.LaunchError:
            return None
        state, _, reason = lines[0].partition(' ')
        return reason.strip() if state == 'PENDING' else None

    def _refused(self, why: str | None = None) -> str:
        said = '\n'.join('  ' + line for line in self._said) or '  (salloc said nothing)'
        asked = '\n'.join('  ' + c.describe() for c in self._components)
        return (f'Slurm did not run the job of program {self._program!r}'
                + (f' ({self.job_id})' if self.job_id else '') + f': {why or "salloc failed"}.'
                f'\nsalloc said:\n{said}\nthe job asked for:\n{asked}')

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        try:
            self._process.stdin.close()  # The holder ends, so salloc gives the job back.
        except OSError:
            pass
        try:
            self._process.wait(COMMAND_TIMEOUT_S + 5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
