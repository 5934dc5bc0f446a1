"""``lp.attach(program_id)``: a handle on a submitted program, from any process of its user.

    program = lp.attach('trainer-3f9a1c')
    program.state()          # 'pending', 'running', 'ended', 'failed' or 'lost'
    program.status()         # the record, and each node's state while it runs
    print(program.logs(node='learner', grep='loss'))
    program.stop(grace=30)   # the clean stop of lp.stop(); the platform's kill as the fallback
    program.wait()           # the controller's exit code

Everything goes through the program's record (``records``), the platform it
was submitted to (``slurm``, ``ssh``) and the controller's endpoint, which
answers only callers that prove the program's secret.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Iterator

from launchpad_py import errors
from launchpad_py.launchers.ssh.host import SshHost
from launchpad_py.submission import client, dashboard_relay, forward, logs, records
from launchpad_py.submission.platforms import kubernetes, slurm, ssh

PLATFORMS = {'slurm': slurm, 'ssh': ssh, 'kubernetes': kubernetes}
#: How ``wait`` spaces its looks at the platform: nothing announces a remote controller's end,
#: so it looks again soon at first (most waits are short, and each answer came up to a whole
#: pause late), then every ``_POLL_S`` (each look may be an ssh session or a scheduler query).
_FIRST_POLL_S = 0.05
_POLL_S = 1.0


class SubmittedProgram:
    """A submitted program, found by its id; holds no connection between calls."""

    def __init__(self, record: dict):
        self.record = record
        self.id, self.name, self.launcher = record['id'], record['name'], record['launcher']
        self._platform = PLATFORMS[self.launcher]

    def __repr__(self) -> str:
        return f'<SubmittedProgram {self.id} ({self.launcher}, {self.where})>'

    @property
    def where(self) -> str:
        if self.launcher == 'slurm':
            return f'Slurm job {self.record.get("job_id")}'
        if self.launcher == 'kubernetes':
            namespace = kubernetes.options_of(self.record).namespace
            return f'Kubernetes Job {namespace}/{self.record["job"]}'
        return f'{self.record["host"]} pid {self.record.get("pid")}'

    def result(self) -> dict | None:
        """What the controller wrote when it ended (``exit_code``, ``ended``), else None."""
        text = self._platform.read(self.record, records.RESULT)
        return json.loads(text) if text else None

    def state(self) -> str:
        """'pending', 'running', 'ended' (exit 0), 'failed' (another exit) or 'lost' (gone
        without a word: killed, cancelled, or its host lost); 'submitting' for a moment."""
        if not any(self.record.get(key) for key in ('job_id', 'pid', 'job_uid')):
            return 'submitting'  # Its record is being written (or the submit failed just now).
        result = self.result()
        if result is None:
            seen = self._platform.state(self.record)
            if seen == 'PENDING':
                return 'pending'
            if seen is not None:
                return 'running'
            result = self.result()  # It may have ended between the two looks.
        if result is None:
            return 'lost'
        return 'ended' if result['exit_code'] == 0 else 'failed'

    def ask(self, request: tuple, timeout: float = 10.0):
        """One request to the controller's endpoint (see ``endpoint``)."""
        return client.ask(self._platform.read(self.record, records.ENDPOINT),
                          records.secret_of(self.record), request, timeout)

    def status(self) -> dict:
        """The record's facts, the state, and (while it runs) each program's node table."""
        state = self.state()
        status = {'id': self.id, 'name': self.name, 'launcher': self.launcher,
                  'where': self.where, 'started': self.record['started'], 'state': state,
                  'programs': []}
        if state == 'running':
            try:
                status['programs'] = self.ask(('statistics',))['programs']
            except client.NotReachableError:
                pass  # Still starting, or ending: the state says enough.
        result = self.result()
        if result:
            status['exit_code'] = result['exit_code']
        return status

    def logs(self, node: str | None = None, grep: str | None = None, since: float | None = None,
             times: bool = False) -> str:
        """The controller's output so far: every node's lines, prefixed ``[label/index]``;
        ``since`` (epoch seconds) drops older lines; ``times`` keeps each line's UTC time."""
        text = self._platform.read(self.record, records.LOG) or ''
        return ''.join(logs.select(text.splitlines(True), node, grep, since, times))

    def follow_logs(self, node: str | None = None, grep: str | None = None,
                    since: float | None = None, times: bool = False) -> Iterator[str]:
        """The output so far (as ``logs``), then live, until the controller ends."""
        if self.launcher == 'ssh':
            tail = ssh.follow(self.record, records.LOG)
            try:
                yield from logs.select(tail.stdout, node, grep, since, times)
            finally:
                tail.kill()
                tail.wait()
            return
        if self.launcher == 'kubernetes':
            yield from logs.select(kubernetes.follow(self.record), node, grep, since, times)
            return
        path = f'{self.record["dir"]}/{records.LOG}'
        yield from logs.select(logs.follow_file(path, lambda: self.state() not in (
            'pending', 'running')), node, grep, since, times)

    def open_dashboard(self, local_port: int = 0, ssh_options: list[str] | None = None,
                       via: str | None = None) -> tuple[forward.Forward, str]:
        """A local port forward to the dashboard (``lp.launch(..., dashboard=True)`` or
        ``--lp_dashboard``) and its URL with the token; ``close()`` the forward when done.

        Over ssh to the controller's host: the submission's host and ssh options, or for
        Slurm the node's address with ``ssh_options``. On Kubernetes, relayed by the
        controller's endpoint, reached ``via`` 'direct' (the pod's IP) or 'api' (the API
        server's port forward); by default direct if it answers, else the API.
        """
        if self.launcher == 'kubernetes':
            tunnel = dashboard_relay.open_for(self, local_port, via)
            return tunnel, f'http://127.0.0.1:{tunnel.local_port}/?token={tunnel.token}'
        if via is not None:
            raise errors.ProgramError(f'dashboard {self.id}: --via is for Kubernetes programs '
                                      f'(this one runs on {self.launcher})')
        reply = self.ask(('statistics',))
        board = next((p['dashboard'] for p in reply['programs'] if p.get('dashboard')), None)
        if board is None:
            raise errors.ProgramError(f'program {self.id} serves no dashboard: launch it with '
                                      'dashboard=True, or pass --lp_dashboard to the script')
        host = (ssh.host_of(self.record) if self.launcher == 'ssh' else
                SshHost(reply['host'], ssh_options=ssh_options or None))
        tunnel = forward.Forward(host, board['port'], local_port)
        return tunnel, f'http://127.0.0.1:{tunnel.local_port}/?token={board["token"]}'

    def wait(self, timeout: float | None = None) -> int:
        """Waits until the controller ends; its exit code (TimeoutError after ``timeout``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        pause, pause_s = threading.Event(), _FIRST_POLL_S
        while True:
            state = self.state()
            if state == 'lost':
                raise errors.LaunchError(f'program {self.id} ({self.where}) ended without a '
                                         f'result: killed, cancelled or its host lost; see '
                                         f'`python -m launchpad_py logs {self.id}`')
            if state in ('ended', 'failed'):
                return self.result()['exit_code']
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f'program {self.id} still {state} after {timeout}s')
            pause.wait(pause_s)
            pause_s = min(_POLL_S, 2 * pause_s)

    def stop(self, grace: float | None = None, timeout: float = 60.0) -> str:
        """The clean stop (nodes get ``grace`` seconds), else the platform's kill; the final state."""
        if self.state() in ('pending', 'running'):
            try:
                if not self.ask(('stop', grace))['stopping']:
                    raise client.NotReachableError('nothing launched yet')
                self.wait(timeout)
            except (client.NotReachableError, TimeoutError, errors.LaunchError):
                self._platform.cancel(self.record)  # Not started yet, or deaf: end it anyway.
                try:
                    self.wait(timeout)
                except errors.LaunchError:
                    pass
        return self.state()


def attach(program_id: str) -> SubmittedProgram:
    """The handle of a program this user submitted (``records.UnknownProgramError`` if none)."""
    return SubmittedProgram(records.load(program_id))


def submitted_programs() -> list[SubmittedProgram]:
    """Every program this user submitted (that still has a record), newest first."""
    return [SubmittedProgram(record) for record in records.all_records()
            if record.get('launcher') in PLATFORMS]
