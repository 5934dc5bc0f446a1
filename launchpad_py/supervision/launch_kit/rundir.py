"""A launch's private directory, and the removal of what dead launches left behind.

Unix socket paths are limited to 107 bytes, so nothing that holds a socket
lives under ``TMPDIR`` (pytest's ``tmp_path``, cluster scratch directories
and macOS's ``/var/folders/...`` are all long). Each launch gets
``/tmp/launchpad_py-<uid>/launch-XXXXXXXX/`` instead, in the user's private
0700 directory that courier sockets share: node specs, tmux scripts and the
tmux control socket go there, and it is removed when the program ends.

    directory = LaunchDirectory()      # also sweeps what dead launches left
    directory.path; directory.close()

A launcher killed with SIGKILL cannot clean up, so its launch holds an
``flock`` on ``owner`` for as long as it runs: the kernel drops the lock when
the process dies, whatever killed it, and the next launch removes every
directory whose lock it can take. Courier sockets of killed servers are
removed at the same time (``uds.remove_stale_sockets``). Only what is
provably dead goes; another running program's files are never touched.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import tempfile

from launchpad_py.courier.transports import uds

_log = logging.getLogger(__name__)
_PREFIX = 'launch-'


class LaunchDirectory:
    """The private directory of one launch, locked by this process while it exists."""

    def __init__(self):
        sweep()
        base = uds.runtime_dir()
        if base is None:  # No private directory on this host: a fresh one of our own.
            self.path = tempfile.mkdtemp(prefix='launchpad_py-', dir='/tmp')
            self._owner = None
            return
        # Under the directory's shared lock, so no sweep sees it before it is locked.
        with uds.directory_lock(base, exclusive=False):
            self.path = tempfile.mkdtemp(prefix=_PREFIX, dir=base)
            self._owner = os.open(os.path.join(self.path, 'owner'), os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(self._owner, fcntl.LOCK_EX)

    def close(self) -> None:
        """Removes the directory, then what other dead launches and servers left."""
        shutil.rmtree(self.path, ignore_errors=True)
        if self._owner is not None:
            os.close(self._owner)
            self._owner = None
        sweep()


def sweep() -> None:
    """Removes the directories of dead launches and the sockets of dead courier servers."""
    base = uds.runtime_dir()
    if base is None:
        return
    with uds.directory_lock(base, exclusive=True):
        for name in os.listdir(base):
            path = os.path.join(base, name)
            if name.startswith(_PREFIX) and _owner_is_gone(path):
                _log.debug('removing %s, left by a launcher that died', path)
                shutil.rmtree(path, ignore_errors=True)
    uds.remove_stale_sockets()


def _owner_is_gone(path: str) -> bool:
    try:
        fd = os.open(os.path.join(path, 'owner'), os.O_RDWR)
    except FileNotFoundError:  # Made and locked under the lock we hold: its maker died.
        return os.path.isdir(path)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:  # Closing drops a lock we took; a directory we remove needs none.
        with contextlib.suppress(OSError):
            os.close(fd)
    return True
