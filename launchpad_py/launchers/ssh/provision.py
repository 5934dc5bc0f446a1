"""``SshHost(provision=True)``: the user's requirements installed on a host, when asked.

    host = lp.SshHost('vm1', python='/usr/bin/python3', requirements=['numpy>=1.24'],
                      provision=True)

Before the check, each such host gets a venv of its own under
``~/.cache/launchpad_py/envs/<hash>`` (the hash of its python, requirements
and ``pip_args``), made from its ``python`` with that python's packages
visible after its own (launchpad_py comes from there), and
``pip install``s the requirements from whatever index the host reaches
(``pip_args`` may name another, or ``--no-index --find-links DIR``). pip's
lines are shown as they come, prefixed with the host. A venv made before is
reused as it is; nothing is installed on a host that does not ask for it.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import shlex
import subprocess
import sys

from launchpad_py import errors
from launchpad_py.launchers.ssh.host import SshHost

_TIMEOUT_S = 1800
_DONE = '.launchpad_provisioned'
# The venv sees its parent python's packages after its own (launchpad_py comes from there;
# ``--system-site-packages`` would reach only the base interpreter's when that is a venv).
_PURELIB = 'import sysconfig; print(sysconfig.get_paths()["purelib"])'
_SITES = 'import site; print("\\n".join(site.getsitepackages()))'


def _venv_of(host: SshHost) -> str:
    key = '\0'.join([host.python or sys.executable, *sorted(host.requirements),
                     '--', *(host.pip_args or ())])
    return f'.cache/launchpad_py/envs/{hashlib.sha256(key.encode()).hexdigest()[:16]}'


def _script(host: SshHost, venv: str) -> str:
    python = shlex.quote(host.python or sys.executable)
    pip = shlex.join([*(host.pip_args or ()), *host.requirements])
    return (f'set -e; cd "$HOME"; if [ -f {venv}/{_DONE} ]; then echo "cached: $HOME/{venv}"; '
            f'exit 0; fi; rm -rf {venv}.new; mkdir -p -m 700 {venv}.new; '
            f'{python} -m venv {venv}.new; '
            f'sp=$({venv}.new/bin/python -c {shlex.quote(_PURELIB)}); '
            f'{python} -c {shlex.quote(_SITES)} > "$sp/launchpad_py_parent.pth"; '
            f'{venv}.new/bin/python -m pip install --disable-pip-version-check '
            f'--progress-bar off {pip} 2>&1; '
            f'rm -rf {venv}; mv {venv}.new {venv}; touch {venv}/{_DONE}; echo "made: $HOME/{venv}"')


def _provision(host: SshHost) -> tuple[SshHost, str | None]:
    venv = _venv_of(host)
    argv = host.ssh_argv(_script(host, venv))
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    tail = []
    for line in process.stdout:  # Progress, as pip gives it.
        print(f'launchpad_py: provision {host.name}: {line.rstrip()}', file=sys.stderr, flush=True)
        tail = (tail + [line.rstrip()])[-3:]
    if process.wait(_TIMEOUT_S) != 0:
        return host, f'provisioning failed: {" / ".join(tail)}'
    home = next((line.split(': ', 1)[1] for line in tail if line.startswith(('made', 'cached'))))
    return dataclasses.replace(host, python=f'{home}/bin/python', provision=False), None


def provision_hosts(hosts: list[SshHost]) -> dict[SshHost, SshHost]:
    """Each host with ``provision=True`` → the same host running its provisioned venv's python;
    raises one LaunchError naming every host that failed."""
    asked = [h for h in hosts if h.provision]
    with concurrent.futures.ThreadPoolExecutor(max(1, min(16, len(asked)))) as pool:
        done = dict(zip(asked, pool.map(_provision, asked)))
    problems = [f'  {host.name}: {why}' for host, (_, why) in done.items() if why]
    if problems:
        raise errors.LaunchError('the ssh launcher could not provision these hosts; nothing was '
                                 'started:\n' + '\n'.join(problems))
    return {host: done[host][0] if host in done else host for host in hosts}
