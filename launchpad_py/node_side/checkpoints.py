"""Where a node keeps its checkpoints, and the hooks that write one before a planned stop.

A node that restarts (``lp.Restart``) or resumes in a new launch must find what it
saved: ``lp.checkpoint_dir()`` is the same directory for every start of the same node
(``<root>/<label>/<index>``). The root is ``$LAUNCHPAD_PY_CHECKPOINT_DIR/<program>``
when that variable is set (local nodes inherit it; the remote launchers pass theirs
on; set it to shared storage for nodes that may come back on another host, and to
the same path again to resume a program in a new launch); otherwise a private
directory of this launch under ``~/.launchpad_py/checkpoints``, named from the
program's secret, which every start of every node of one launch shares and no other
launch has.

Before a planned stop (``lp.stop()``, the launcher stopping the program or removing a
node, SIGTERM from a scheduler preempting the node) every handler the node registered
runs, and so does its object's ``checkpoint()`` method if it has one, all at once,
before the stop event is set: the node's state is still whole. They get
``deadline_s()`` together (0.8 of the termination notice, ``--lp_termination_notice_secs``,
after which the launcher kills the node); one still running then is left behind, with
a warning. A crash or SIGKILL runs nothing: save periodically too.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import shutil
import threading
import time
import weakref
from typing import Callable

from launchpad_py import errors, flags
from launchpad_py.node_side import runtime

#: The variable naming the checkpoint root (the program's directories go under it).
ROOT_ENV = 'LAUNCHPAD_PY_CHECKPOINT_DIR'
_log = logging.getLogger(__name__)


def _root(scope: runtime.ProgramScope) -> str:
    given = os.environ.get(ROOT_ENV)
    if given:
        return os.path.join(os.path.abspath(os.path.expanduser(given)), scope.name)
    return private_root(scope.name, scope.secret)


def private_root(program_name: str, secret: bytes | None) -> str:
    """The directory of one launch's checkpoints where no root is given: named from the
    program's secret, which every start of its nodes shares, no other launch has, and a
    name derived from it does not reveal."""
    run = (hmac.new(secret, b'launchpad_py checkpoint directory', hashlib.sha256)
           .hexdigest()[:16] if secret else 'unsecured')
    return os.path.join(os.path.expanduser('~'), '.launchpad_py', 'checkpoints',
                        f'{program_name}-{run}')


def remove_private_root(program_name: str, secret: bytes | None) -> None:
    """Removes a finished launch's own directory (no later launch can find it); checkpoints
    under a given root are the user's and stay."""
    if not os.environ.get(ROOT_ENV):
        shutil.rmtree(private_root(program_name, secret), ignore_errors=True)


def checkpoint_dir() -> str:
    """The calling node's checkpoint directory, made (0700) if missing; the same for every
    start of this node, so a restarted node finds what it saved.

        path = os.path.join(lp.checkpoint_dir(), 'state.pkl')
    """
    node = runtime.thread_node() or runtime.process_node()
    if node is None:
        raise errors.ProgramError('lp.checkpoint_dir() is for code running in a node: this '
                                  'thread belongs to no node of a launched program')
    path = os.path.join(_root(runtime.current_scope()), node.label, str(node.index))
    _make_private(path)
    return path


def _make_private(path: str) -> None:
    """Makes ``path`` and every missing directory above it 0700 (``os.makedirs`` gives only
    the last one its mode): other users see neither the checkpoints nor the programs' names."""
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        path = os.path.dirname(path)
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:  # Another node of the program made it just now.
            pass


def register_checkpoint_handler(handler: Callable[[], None]) -> None:
    """Calls ``handler()`` before a planned stop of the calling node's program or of the node
    (see the module's docstring for when, and its deadline)."""
    if not callable(handler):
        raise TypeError(f'a checkpoint handler must be callable (got {handler!r})')
    scope = runtime.current_scope()
    with _lock:
        handlers = _handlers.setdefault(scope, [])
        handlers.append(handler)
        if len(handlers) == 1:
            scope.run_first_on_stop(lambda: run_handlers(scope))


def register_object(obj: object) -> None:
    """Registers ``obj.checkpoint`` if the node's object has such a method."""
    method = getattr(obj, 'checkpoint', None)
    if callable(method):
        register_checkpoint_handler(method)


def deadline_s() -> float:
    """Seconds the handlers of one stop get together."""
    return 0.8 * float(flags.value_or_default(flags.TERMINATION_NOTICE_SECS))


def run_handlers(scope: runtime.ProgramScope) -> None:
    """Runs ``scope``'s handlers at once, each in a thread, until they end or the deadline."""
    with _lock:
        handlers = _handlers.pop(scope, [])
    threads = [threading.Thread(target=_run_one, args=(handler,), daemon=True,
                                name='lp-checkpoint') for handler in handlers]
    for thread in threads:
        thread.start()
    end = time.monotonic() + deadline_s()
    for handler, thread in zip(handlers, threads):
        thread.join(max(0.0, end - time.monotonic()))
        if thread.is_alive():
            _log.warning('checkpoint handler %r did not finish within %.1f s of the stop; the '
                         'node stops without waiting for it', handler, deadline_s())


def _run_one(handler: Callable[[], None]) -> None:
    try:
        handler()
    except Exception:  # One failing checkpoint must not keep the others or the stop back.
        _log.exception('checkpoint handler %r raised', handler)


_handlers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Scope -> its handlers.
_lock = threading.Lock()
