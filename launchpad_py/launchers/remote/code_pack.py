"""The user's code as one pack, for hosts that do not share the launcher's filesystem.

    pack = code_pack.make(code_pack.user_paths())   # cwd + the user's own import-path entries
    pack.digest, len(pack.data)                       # sha256 of the pack; its gzip'd bytes

A host agent asked for ``pack.digest`` answers whether its cache holds it
(``node_side/code_cache.py``); only a host that lacks it gets the bytes, once
per host, over the agent's ssh session. The pack is deterministic (sorted
names, no times or owners), so the same files give the same digest and a
second launch sends nothing. Only the user's own directories go: never the
interpreter's, a venv's or site-packages (the host has its own environment),
nor launchpad_py's own package (installed there, its version checked).
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import threading

from launchpad_py import errors
from launchpad_py.node_side.code_cache import MANIFEST

#: The default limit on the files of a pack (before compression), in MB.
DEFAULT_LIMIT_MB = 100
LIMIT_ENV = 'LP_SHIP_CODE_LIMIT_MB'
_SKIP_DIRS = {'.git', '__pycache__', '.mypy_cache', '.pytest_cache', '.tox', 'node_modules'}

_lock = threading.Lock()
_sent = {'bytes_sent': 0, 'packs_sent': 0, 'packs_cached': 0}


@dataclasses.dataclass(frozen=True)
class CodePack:
    """``data``: the gzip'd tar; ``digest``: its sha256; ``paths``: the directories it holds."""

    data: bytes
    digest: str
    paths: tuple[str, ...]
    files_bytes: int


def _our_root() -> str:
    """The directory launchpad_py is imported from (a checkout, when installed editable)."""
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.realpath(os.path.dirname(package))


def _not_users(path: str) -> bool:
    """True for the interpreter's, a venv's and site-packages."""
    real = os.path.realpath(path)
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                              sys.base_exec_prefix)}
    return (any(real == p or real.startswith(p + os.sep) for p in prefixes)
            or any(part in ('site-packages', 'dist-packages') for part in real.split(os.sep))
            or os.path.exists(os.path.join(real, 'pyvenv.cfg')))


def user_paths() -> list[str]:
    """The launcher's working directory, then the user's own import-path entries, once each."""
    found = []
    for path in [os.getcwd(), *(p or os.getcwd() for p in sys.path)]:
        real = os.path.realpath(path)
        if os.path.isdir(real) and real not in found and not _not_users(real):
            found.append(real)
    return found


def _files(root: str) -> list[str]:
    """The files under ``root`` to ship, relative: git's view (``.gitignore`` honoured) in a git
    tree, else every file but caches and nested venvs; never launchpad_py itself (launching
    from its checkout), which the host has installed."""
    names = _listed(root)
    if root == _our_root():
        names = [n for n in names if not n.startswith('launchpad_py' + os.sep)]
    return names


def _listed(root: str) -> list[str]:
    try:
        listed = subprocess.run(['git', '-C', root, 'ls-files', '-co', '--exclude-standard', '-z'],
                                capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        listed = None
    if listed is not None and listed.returncode == 0:
        names = [n for n in listed.stdout.decode(errors='surrogateescape').split('\0') if n]
        return sorted(n for n in names if os.path.isfile(os.path.join(root, n)))
    names = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d not in _SKIP_DIRS
                            and not os.path.exists(os.path.join(directory, d, 'pyvenv.cfg')))
        names += [os.path.relpath(os.path.join(directory, f), root) for f in files
                  if not f.endswith('.pyc')]
    return sorted(names)


def limit_mb() -> float:
    return float(os.environ.get(LIMIT_ENV, DEFAULT_LIMIT_MB))


def make(paths: list[str], limit: float | None = None) -> CodePack:
    """Packs ``paths`` (the first is where nodes run); raises LaunchError past ``limit`` MB."""
    limit = limit_mb() if limit is None else limit
    listing = [(index, path, name) for index, path in enumerate(paths) for name in _files(path)]
    size = sum(os.path.getsize(os.path.join(path, name)) for _, path, name in listing)
    if size > limit * 1e6:
        biggest = max(listing, key=lambda f: os.path.getsize(os.path.join(f[1], f[2])))
        raise errors.LaunchError(
            f'the code to ship to the hosts is {size / 1e6:.1f} MB ({len(listing)} files in '
            f'{paths}), over the limit of {limit:g} MB; the largest is '
            f'{os.path.join(biggest[1], biggest[2])!r}. Add data and outputs to .gitignore, '
            f'launch from a smaller directory or name the directories with ship_code=[...], '
            f'or raise the limit ({LIMIT_ENV}=...)')
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode='w', format=tarfile.PAX_FORMAT) as tar:
        manifest = json.dumps({'paths': [f'p{i}' for i in range(len(paths))]}).encode()
        tar.addfile(_member(MANIFEST, len(manifest), 0o600), io.BytesIO(manifest))
        for index, path, name in listing:
            full = os.path.join(path, name)
            mode = 0o700 if os.access(full, os.X_OK) else 0o600
            with open(full, 'rb') as source:
                tar.addfile(_member(f'p{index}/{name}', os.path.getsize(full), mode), source)
    data = gzip.compress(raw.getvalue(), mtime=0)
    return CodePack(data, hashlib.sha256(data).hexdigest(), tuple(paths), size)


def _member(name: str, size: int, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, mode, 0
    return info


def record(bytes_sent: int) -> None:
    """Counts one host's pack: ``bytes_sent`` 0 when the host had it cached."""
    with _lock:
        _sent['bytes_sent'] += bytes_sent
        _sent['packs_sent' if bytes_sent else 'packs_cached'] += 1


def statistics() -> dict[str, int]:
    """Code shipped by this process so far: bytes, packs sent, packs a host had already."""
    with _lock:
        return dict(_sent)
