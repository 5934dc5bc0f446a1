"""Submitting over ssh: the controller on a named host, in a session that outlives the connection.

    submit(record, payload)    # ssh HOST python -m ...controller_main --detach DIR  (stdin: payload)
    state(record)              # 'RUNNING' while the controller's pid is alive there, else None
    cancel(record)             # SIGTERM, then SIGKILL, to the controller's process group there

The record, the secret (and a pickled program) travel on the ssh session's
stdin, never on its command line; ``controller_main --detach`` writes them
to the program's directory on the host (0600) and starts the controller with
``setsid``, its output in a file there, so closing the ssh connection, or the
terminal it came from, leaves it running. Files are read over ssh, so the host
need not share storage with this machine.
"""

from __future__ import annotations

import json
import shlex
import subprocess

from launchpad_py import errors
from launchpad_py.launchers.ssh.host import SshHost
from launchpad_py.submission import records

_TIMEOUT_S = 60


def host_of(record: dict) -> SshHost:
    return SshHost(record['host'], ssh_options=record.get('ssh_options') or None,
                   python=record.get('python'), workdir=record.get('cwd'))


def _ssh(record: dict, command: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    argv = host_of(record).ssh_argv(command)
    try:
        return subprocess.run(argv, input=stdin, capture_output=True, text=True,
                              timeout=_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise errors.LaunchError(f'ssh to {record["host"]} failed: {exc}') from None


def submit(record: dict, payload: dict) -> dict:
    """Starts the controller on the host; returns the record's ssh fields (``pid``)."""
    command = host_of(record).remote_command(
        ['-m', 'launchpad_py.submission.controller_main', '--detach', record['dir']])
    done = _ssh(record, command, json.dumps(payload))
    pid = next((line[len(records.PID_MARK):] for line in done.stdout.splitlines()
                if line.startswith(records.PID_MARK)), None)
    if done.returncode != 0 or pid is None:
        raise errors.LaunchError(f'could not start program {record["name"]!r} on '
                                 f'{record["host"]} (ssh exit {done.returncode}): '
                                 f'{(done.stderr or done.stdout).strip()[-2000:]}')
    return {'pid': int(pid), 'where': 'host'}


def _is_ours(record: dict) -> str:
    """A shell test: the pid is alive and is this program's controller (pids are reused)."""
    return (f'tr "\\0" " " < /proc/{int(record["pid"])}/cmdline 2>/dev/null | '
            f'grep -qF -- {shlex.quote(record["dir"])}')


def state(record: dict) -> str | None:
    done = _ssh(record, f'{_is_ours(record)} && echo RUNNING')
    if done.returncode == 255:
        raise errors.LaunchError(f'cannot reach {record["host"]}: {done.stderr.strip()}')
    return 'RUNNING' if 'RUNNING' in done.stdout else None


def cancel(record: dict, grace: float = 5.0) -> None:
    pid = int(record['pid'])
    _ssh(record, f'{_is_ours(record)} || exit 0; kill -TERM -- -{pid}; '
                 f'for i in $(seq {int(grace * 10)}); do kill -0 -- -{pid} 2>/dev/null || exit 0; '
                 f'sleep 0.1; done; kill -KILL -- -{pid}')


def read(record: dict, name: str) -> str | None:
    path = shlex.quote(f'{record["dir"]}/{name}')
    done = _ssh(record, f'test -e {path} || exit 7; cat {path}')
    if done.returncode == 7:
        return None
    if done.returncode != 0:
        raise errors.LaunchError(f'cannot read {name} of {record["id"]} on {record["host"]}: '
                                 f'{done.stderr.strip()}')
    return done.stdout


def follow(record: dict, name: str) -> subprocess.Popen:
    """``tail -F`` of the file over ssh, ending when the controller does."""
    path = shlex.quote(f'{record["dir"]}/{name}')
    argv = host_of(record).ssh_argv(f'exec tail -n +1 -F --pid={int(record["pid"])} {path} '
                                    '2>/dev/null')
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
