"""The host's cache of shipped code: ``~/.cache/launchpad_py/code/<sha256>/``, one per pack.

    path = code_cache.lookup(digest)               # None: the launcher must send the pack
    path = path or code_cache.install(digest, data)
    code_cache.activate(path)                      # nodes forked after this run from it

A pack (``launchers/remote/code_pack.py``) holds the launcher's working
directory and the user's own import-path entries. A cache entry is trusted
only when it is a directory of this user, mode 0700, whose marker names its
digest; ``install`` checks the bytes against the digest before unpacking and
renames the finished tree into place, so a half-unpacked pack is never used
and two launches unpacking the same pack at once both end with one entry.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import secrets
import shutil
import stat
import sys
import tarfile
import tempfile

MANIFEST = 'launchpad_code.json'
_MARKER = '.launchpad_code_sha256'


def root() -> str:
    base = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
    return os.path.join(base, 'launchpad_py', 'code')


def _private_dirs(path: str) -> None:
    """Makes ``path`` and its missing parents 0700."""
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        path = os.path.dirname(path)
    for directory in reversed(missing):
        os.makedirs(directory, mode=0o700, exist_ok=True)


def _trusted(path: str, digest: str) -> bool:
    try:
        info = os.lstat(path)
        with open(os.path.join(path, _MARKER)) as marker:
            named = marker.read().strip()
    except OSError:
        return False
    return (stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
            and not info.st_mode & 0o077 and named == digest)


def lookup(digest: str) -> str | None:
    """The unpacked pack ``digest`` if this host holds a trusted copy, else None."""
    path = os.path.join(root(), _checked(digest))
    return path if _trusted(path, digest) else None


def _checked(digest: str) -> str:
    if len(digest) != 64 or any(c not in '0123456789abcdef' for c in digest):
        raise ValueError(f'not a sha256 digest: {digest!r}')
    return digest


def install(digest: str, data: bytes) -> str:
    """Unpacks ``data`` (checked against ``digest``) into the cache; its path."""
    if hashlib.sha256(data).hexdigest() != _checked(digest):
        raise ValueError(f'the code pack received does not match its digest {digest[:12]}')
    _private_dirs(root())
    final = os.path.join(root(), digest)
    staging = tempfile.mkdtemp(prefix='.unpacking-', dir=root())  # 0700
    try:
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data))) as tar:
            for member in tar.getmembers():
                parts = member.name.split('/')
                if not member.isfile() or member.name.startswith('/') or '..' in parts:
                    raise ValueError(f'refusing pack member {member.name!r}')
                target = os.path.join(staging, *parts)
                _private_dirs(os.path.dirname(target))
                with tar.extractfile(member) as source, open(
                        os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                                member.mode & 0o700), 'wb') as sink:
                    shutil.copyfileobj(source, sink)
        with open(os.path.join(staging, _MARKER), 'w') as marker:
            marker.write(digest)
        if os.path.lexists(final) and not _trusted(final, digest):
            _set_aside(final)  # Not ours, not private or unfinished: never used, never deleted.
        try:
            os.rename(staging, final)
        except OSError:  # Another launch put it there first.
            if not _trusted(final, digest):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def _set_aside(path: str) -> None:
    os.rename(path, f'{path}.untrusted-{secrets.token_hex(4)}')


def activate(path: str) -> list[str]:
    """Runs what follows (and every child forked after) from the pack at ``path``: the first
    directory as working directory, all of them first on the import path; returns them."""
    with open(os.path.join(path, MANIFEST)) as manifest:
        entries = [os.path.join(path, p) for p in json.load(manifest)['paths']]
    for entry in entries:
        os.makedirs(entry, mode=0o700, exist_ok=True)  # An entry without files still exists.
    os.chdir(entries[0])
    sys.path[:0] = [e for e in entries if e not in sys.path]
    os.environ['PYTHONPATH'] = os.pathsep.join(
        entries + [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p])
    return entries
