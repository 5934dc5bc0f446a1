"""``lp.SshHost``: where the SSH launcher runs a group, and the checks made before it does.

    lp.launch(p, launch_type='ssh', resources={
        'learner': lp.SshHost('gpu-box', gpus=[0]),
        'actor': [lp.SshHost('h1'), lp.SshHost('h2')],   # nodes spread round-robin
    })

By default hosts share the code and environment with the launcher (a shared
filesystem or the same image): a node runs the launcher's own interpreter in
the launcher's working directory, with the launcher's import path. For hosts
that share nothing, ``ship_code=True`` sends the working directory and the
user's own import-path entries (``launchers/remote/code_pack.py``) and
``python=`` names the host's own interpreter; ``requirements=`` lists packages
that must be there (``provision=True`` installs them into a venv of their own,
``launchers/ssh/provision.py``). ``check_hosts`` proves all of it on every host
before anything starts, with one line per bad host.

    lp.SshHost('vm1', python='/opt/lp/env/bin/python', ship_code=True,
               requirements=['numpy>=1.24'])
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import importlib.metadata
import json
import os
import re
import shlex
import socket
import subprocess
import sys

from launchpad_py import errors, flags
from launchpad_py.launchers.remote.launch import node_environment

#: Options every launcher ssh command gets after the user's own (ssh keeps the first value):
#: never prompt, and notice a dead connection within seconds.
_DEFAULT_OPTIONS = ('-o', 'BatchMode=yes', '-o', 'ConnectTimeout=10',
                    '-o', 'ServerAliveInterval=2', '-o', 'ServerAliveCountMax=3')
_CHECK_TIMEOUT_S = 60
#: A requirement as the check accepts it: a distribution name, then an optional version spec.
_REQUIREMENT = re.compile(r'^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[A-Za-z0-9,._-]+\])?\s*'
                          r'((===?|~=|!=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*,?\s*)*$')
_CHECK_MARK = 'LPCHECK '
_CHECK_SCRIPT = '''
import json, os, sys
out = {"python": sys.version.split()[0], "ssh": os.environ.get("SSH_CONNECTION", "")}
try:  # Found and versioned without importing it: the check stays quick.
    import importlib.metadata, importlib.util
    spec = importlib.util.find_spec("launchpad_py")
    if spec is None:
        raise ModuleNotFoundError("No module named 'launchpad_py'")
    out["path"] = os.path.dirname(spec.origin or "")
    out["version"] = importlib.metadata.version("launchpad_py")
    out["missing"] = [name for name in ("grpc", "cloudpickle", "numpy", "absl", "portpicker")
                      if importlib.util.find_spec(name) is None]
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
out["packages"] = {}
for name in sys.argv[1:]:  # The user's requirements: the version installed, or None.
    try:
        out["packages"][name] = importlib.metadata.version(name)
    except Exception:
        out["packages"][name] = None
print("LPCHECK " + json.dumps(out), flush=True)
'''


@dataclasses.dataclass(frozen=True)
class SshHost:
    """A host the SSH launcher starts nodes on, and how.

    ``host``: a name or an alias of your ssh config (ProxyJump, keys and agents
    work as in your own ``ssh``); ``port``/``user``: as ``ssh -p``/``-l``;
    ``python``: the interpreter there (default: the launcher's own path);
    ``workdir``: where nodes run (default: the launcher's working directory);
    ``env``: extra variables; ``gpus``: GPU indices or UUIDs, as
    ``CUDA_VISIBLE_DEVICES`` (``[]`` hides all); ``ssh_options``: extra ssh
    arguments, e.g. ``['-F', 'cluster_ssh_config']``.

    For hosts without the launcher's files: ``ship_code``: True packs the
    working directory and your own import-path entries (or a list of
    directories, the first being where nodes run), sends it once per host into
    ``~/.cache/launchpad_py/code/<sha256>/`` and runs nodes from it (None:
    ``--lp_ssh_ship_code``); ``requirements``: packages the host's python must
    have, as pip writes them (``'numpy>=1.24'``), checked before anything
    starts; ``provision``: install them there into a venv per requirements
    (``~/.cache/launchpad_py/envs/<hash>``) when missing, with ``pip_args``
    added to its ``pip install`` (e.g. ``['--index-url', URL]``).
    """

    host: str
    port: int | None = None
    user: str | None = None
    python: str | None = None
    workdir: str | None = None
    env: dict[str, str] | None = None
    gpus: list[int | str] | tuple[int | str, ...] | None = None
    ssh_options: list[str] | tuple[str, ...] | None = None
    ship_code: bool | list[str] | tuple[str, ...] | None = None
    requirements: list[str] | tuple[str, ...] | None = None
    provision: bool = False
    pip_args: list[str] | tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.host, str) or not self.host or self.host.startswith('-'):
            raise TypeError(f"SshHost host must be a host name or ssh alias such as 'h1' "
                            f'(got {self.host!r})')
        if self.port is not None and (isinstance(self.port, bool) or not isinstance(
                self.port, int) or not 0 < self.port < 65536):
            raise ValueError(f'SshHost port must be an int in 1..65535 (got {self.port!r} '
                             f'for {self.host!r})')
        for name in ('user', 'python', 'workdir'):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise TypeError(f'SshHost {name} must be a non-empty string (got {value!r} '
                                f'for {self.host!r})')
        env = self.env or {}
        if not isinstance(env, dict) or not all(
                isinstance(k, str) and k.isidentifier() and isinstance(v, str)
                for k, v in env.items()):
            raise TypeError(f'SshHost env must map variable names to strings (got {env!r} '
                            f'for {self.host!r})')
        options = self.ssh_options or ()
        if isinstance(options, str) or not all(isinstance(o, str) for o in options):
            raise TypeError(f"SshHost ssh_options must be a list of strings such as "
                            f"['-F', 'ssh_config'] (got {options!r} for {self.host!r})")
        if self.gpus is not None and (isinstance(self.gpus, (str, int)) or not all(
                (isinstance(g, int) and not isinstance(g, bool) and g >= 0)
                or (isinstance(g, str) and g) for g in self.gpus)):
            raise TypeError(f'SshHost gpus must be a list of GPU indices or UUIDs, such as '
                            f'[0, 1] or [] for none (got {self.gpus!r} for {self.host!r})')

        self._check_environment_fields()

    def _check_environment_fields(self) -> None:
        code = self.ship_code
        if not (code is None or isinstance(code, bool) or (
                isinstance(code, (list, tuple)) and code
                and all(isinstance(p, str) and os.path.isdir(p) for p in code))):
            raise TypeError(f'SshHost ship_code must be True, False or a non-empty list of '
                            f'existing directories (got {code!r} for {self.host!r})')
        for name in ('requirements', 'pip_args'):
            value = getattr(self, name) or ()
            if isinstance(value, str) or not all(isinstance(v, str) and v for v in value):
                raise TypeError(f"SshHost {name} must be a list of strings such as "
                                f"['numpy>=1.24'] (got {value!r} for {self.host!r})")
        for requirement in self.requirements or ():
            if not _REQUIREMENT.match(requirement):
                raise ValueError(f'SshHost requirements: {requirement!r} is not a requirement '
                                 f"such as 'numpy' or 'numpy>=1.24' (for {self.host!r})")
        if self.provision and not self.requirements:
            raise ValueError(f'SshHost provision=True needs requirements=[...] to install '
                             f'(for {self.host!r})')

    def __hash__(self) -> int:  # env and gpus are lists and dicts; the text says it all.
        return hash(repr(self))

    @property
    def name(self) -> str:
        """The host as messages and statuses show it."""
        user = f'{self.user}@' if self.user else ''
        port = f':{self.port}' if self.port else ''
        return f'{user}{self.host}{port}'

    def ssh_argv(self, remote_command: str) -> list[str]:
        argv = ['ssh', *(self.ssh_options or ()), *_DEFAULT_OPTIONS, '-T']
        if self.port:
            argv += ['-p', str(self.port)]
        if self.user:
            argv += ['-l', self.user]
        return argv + ['--', self.host, remote_command]

    @property
    def ships_code(self) -> bool:
        if self.ship_code is None:
            return bool(flags.value_or_default(flags.SSH_SHIP_CODE))
        return bool(self.ship_code)

    def remote_command(self, python_args: list[str], hide_gpus: bool = False) -> str:
        """``cd workdir && exec env ... python ARGS`` for the remote shell; with shipped code
        the host's home, and none of the launcher's paths (the agent runs nodes from the code)."""
        env = {**node_environment(), **(self.env or {})}
        if self.ships_code and 'PYTHONPATH' not in (self.env or {}):
            del env['PYTHONPATH']
        if self.gpus is not None or (hide_gpus and 'CUDA_VISIBLE_DEVICES' not in env):
            env['CUDA_VISIBLE_DEVICES'] = ','.join(str(g) for g in self.gpus or ())
        assignments = ' '.join(f'{k}={shlex.quote(v)}' for k, v in env.items())
        python = shlex.quote(self.python or sys.executable)
        workdir = shlex.quote(self.workdir or os.getcwd())
        if self.ships_code and not self.workdir:
            workdir = '"$HOME"'
        return (f'cd {workdir} 2>/dev/null || {{ echo "LPCHECK-NOWORKDIR"; exit 3; }}; '
                f'exec env {assignments} {python} {shlex.join(python_args)}')


def _local_version() -> str:
    try:
        return importlib.metadata.version('launchpad_py')
    except importlib.metadata.PackageNotFoundError:
        return 'unknown'


def _is_local(ip: str) -> bool:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((ip, 0))
        return True
    except OSError:
        return False


def _launcher_ip(ssh_connection: str) -> str:
    """Our address as the host reaches it, from its ``SSH_CONNECTION`` ('client port server port').

    The client address is ours unless a jump host (ProxyJump) stands between;
    then it is our interface on the route to the host's own address.
    """
    fields = ssh_connection.split()
    if len(fields) != 4:
        return '127.0.0.1'
    client, _, server, _ = fields
    if _is_local(client):
        return client
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as route:
        route.connect((server, 9))  # Picks a route; sends nothing.
        return route.getsockname()[0]


def check_host(host: SshHost) -> tuple[str | None, str | None]:
    """(the launcher's IP as ``host`` sees it, None) or (None, what is wrong with ``host``)."""
    argv = host.ssh_argv(host.remote_command(['-c', _CHECK_SCRIPT, *_names(host)]))
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=_CHECK_TIMEOUT_S)
    except FileNotFoundError:
        return None, 'the ssh client is not installed here (apt-get install openssh-client)'
    except subprocess.TimeoutExpired:
        return None, f'no answer over ssh within {_CHECK_TIMEOUT_S}s'
    report = next((line[len(_CHECK_MARK):] for line in done.stdout.splitlines()
                   if line.startswith(_CHECK_MARK)), None)
    stderr = done.stderr.strip().splitlines()
    if 'LPCHECK-NOWORKDIR' in done.stdout:
        return None, f'workdir {host.workdir or os.getcwd()!r} does not exist there'
    if report is None and done.returncode == 255:
        return None, f'unreachable over ssh: {stderr[-1] if stderr else "ssh exited with 255"}'
    if report is None:
        python = host.python or sys.executable
        why = stderr[-1] if stderr else f'exit code {done.returncode}'
        return None, f'python {python!r} cannot run there ({why}); set SshHost(python=...)'
    found = json.loads(report)
    if 'error' in found:
        return None, (f'launchpad_py cannot be imported there ({found["error"]}); install it '
                      f'with: {shlex.quote(host.python or sys.executable)} -m pip install '
                      f'launchpad_py=={_local_version()}')
    if found['version'] != _local_version():
        return None, (f'launchpad_py {found["version"]} is installed there ({found["path"]}), '
                      f'the launcher runs {_local_version()}; install the same version')
    if found['missing']:
        return None, (f'launchpad_py cannot run there: its dependencies {found["missing"]} are '
                      f'missing for {host.python or sys.executable}; install launchpad_py with pip')
    unmet = _unmet(host, found['packages'])
    if unmet:
        return None, (f'missing or other versions of {unmet}; install them with: '
                      f'{shlex.quote(host.python or sys.executable)} -m pip install '
                      f'{shlex.join(unmet)}')
    return _launcher_ip(found['ssh']), None


def _names(host: SshHost) -> list[str]:
    return [_REQUIREMENT.match(r).group(1) for r in host.requirements or ()]


def _unmet(host: SshHost, installed: dict[str, str | None]) -> list[str]:
    """The requirements of ``host`` that its python does not meet (by name and version)."""
    try:
        from packaging.requirements import Requirement
    except ImportError:  # Without packaging (not a dependency), only presence is checked.
        Requirement = None
    unmet = []
    for requirement, name in zip(host.requirements or (), _names(host)):
        version = installed.get(name)
        if version is None or (Requirement is not None and not Requirement(
                requirement).specifier.contains(version, prereleases=True)):
            unmet.append(requirement)
    return unmet


def check_hosts(hosts: list[SshHost]) -> dict[SshHost, str]:
    """The launcher's IP per host; raises one LaunchError listing every host that fails."""
    with concurrent.futures.ThreadPoolExecutor(max(1, min(16, len(hosts)))) as pool:
        results = dict(zip(hosts, pool.map(check_host, hosts)))
    problems = [f'  {host.name}: {problem}' for host, (_, problem) in results.items() if problem]
    if problems:
        raise errors.LaunchError('the ssh launcher cannot use these hosts; nothing was started:\n'
                                 + '\n'.join(problems))
    return {host: ip for host, (ip, _) in results.items()}
