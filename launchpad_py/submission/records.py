"""Program records: what was submitted where, kept for the user in a private directory.

A submitted program outlives the process that submitted it, so whatever a
later ``list``, ``logs`` or ``stop`` needs is written down at submit time::

    ~/.launchpad_py/programs/            (0700, ours; LAUNCHPAD_PY_PROGRAMS_DIR moves it)
        trainer-3f9a1c/record.json       (0600: launcher, host or job id, name, start, paths)
        trainer-3f9a1c/secret            (0600: the program's secret, never in argv)

The directory lives in the home directory because a Slurm batch step on a
compute node reads it too (home is shared storage on a cluster). Files that
are not ours alone, or links, are refused, as the run directory's are: another
user who could plant a record could point ``stop`` at anything.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import stat
import time

from launchpad_py import errors

DIR_ENV = 'LAUNCHPAD_PY_PROGRAMS_DIR'
RECORD = 'record.json'
SECRET = 'secret'
# Beside them, written where the controller runs: its output, its address, how it ended.
LOG, ENDPOINT, RESULT, PROGRAM = 'controller.log', 'endpoint.json', 'result.json', 'program.pkl'
PID_MARK = 'LPPID '  # How ``controller_main --detach`` says the controller's pid.
_ID = re.compile(r'[A-Za-z0-9][A-Za-z0-9_.-]{0,80}$')


class UnknownProgramError(errors.LaunchpadError, LookupError):
    """No record of that program id for this user."""


def programs_dir(create: bool = False) -> str:
    """The private directory of this user's program records; made (0700) when ``create``."""
    path = os.environ.get(DIR_ENV) or os.path.join(os.path.expanduser('~'), '.launchpad_py',
                                                    'programs')
    if create:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
    check_private(os.lstat(path), path, stat.S_ISDIR, 0o700)
    return path


def check_private(info: os.stat_result, path: str, kind, widest: int) -> None:
    """Raises PermissionError unless ``path`` is ours, of ``kind``, with mode at most ``widest``."""
    mode = stat.S_IMODE(info.st_mode)
    if not kind(info.st_mode) or info.st_uid != os.getuid() or mode & ~widest:
        raise PermissionError(
            f'refusing {path}: it must be ours (uid {os.getuid()}), not a link, with mode at most '
            f'{widest:04o}; it belongs to uid {info.st_uid} with mode {mode:04o}. Another user '
            f'may have made it: remove it, or set {DIR_ENV} to a directory of your own')


def new_id(name: str) -> str:
    """A fresh program id: the program's name (made safe) and six random hex digits."""
    safe = re.sub(r'[^A-Za-z0-9_.-]', '_', name).lstrip('.-_')[:40] or 'program'
    return f'{safe}-{secrets.token_hex(3)}'


def program_dir(program_id: str) -> str:
    """The directory of ``program_id``'s record; UnknownProgramError when there is none."""
    if not isinstance(program_id, str) or not _ID.match(program_id):
        raise UnknownProgramError(f'{program_id!r} is not a program id (ids look like '
                                  "'trainer-3f9a1c'; `python -m launchpad_py list` shows them)")
    try:
        path = os.path.join(programs_dir(), program_id)
    except FileNotFoundError:
        path = os.path.join(os.environ.get(DIR_ENV) or '~/.launchpad_py/programs', program_id)
    if not os.path.isdir(path):
        raise UnknownProgramError(
            f'no program {program_id!r} was submitted by this user (no record {path}); '
            '`python -m launchpad_py list` shows the ones there are')
    check_private(os.lstat(path), path, stat.S_ISDIR, 0o700)
    return path


def create(record: dict, secret: bytes) -> str:
    """Makes the program's directory with its record and secret (both 0600); returns the dir."""
    path = os.path.join(programs_dir(create=True), record['id'])
    os.mkdir(path, 0o700)
    write_private(os.path.join(path, SECRET), secret.hex())
    save(path, record)
    return path


def save(path: str, record: dict) -> None:
    """(Re)writes the record of the program in ``path``, atomically."""
    staged = os.path.join(path, f'.{RECORD}.{os.getpid()}')
    write_private(staged, json.dumps(record, indent=1), replace=True)
    os.replace(staged, os.path.join(path, RECORD))


def write_private(path: str, data: str | bytes, replace: bool = False) -> None:
    """Writes ``data`` to a file only this user may read (0600; no link is followed)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_TRUNC if replace else os.O_EXCL)
    with open(os.open(path, flags, 0o600), 'wb' if isinstance(data, bytes) else 'w') as out:
        out.write(data)


def read_private(path: str) -> str:
    """The text of ``path``, refused unless it is ours alone (0600 at most, not a link)."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with open(descriptor) as source:
        check_private(os.fstat(descriptor), path, stat.S_ISREG, 0o600)
        return source.read()


def load(program_id: str) -> dict:
    path = program_dir(program_id)
    return dict(json.loads(read_private(os.path.join(path, RECORD))), dir=path)


def secret_of(record: dict) -> bytes:
    return bytes.fromhex(read_private(os.path.join(record['dir'], SECRET)).strip())


def all_records() -> list[dict]:
    """Every readable record of this user, newest first; others' or broken ones are skipped."""
    try:
        base = programs_dir()
    except FileNotFoundError:
        return []
    found = []
    for name in os.listdir(base):
        try:
            found.append(load(name))
        except (OSError, ValueError, errors.LaunchpadError):
            continue
    return sorted(found, key=lambda r: r.get('started', 0), reverse=True)


def started_text(record: dict) -> str:
    return time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(record.get('started', 0)))
