"""Where ``python -m launchpad_py.cli.status`` finds a running program: a handle file and a socket.

Every launch opens a Unix socket in a private run directory (0700, ours) and
writes a handle file (0600) beside it naming the program, the socket, and a
key of its own: the key proves a reader may see the statistics, and it is not
the program secret, so the file gives nobody the right to call a node. Both
go when the program ends::

    $XDG_RUNTIME_DIR/launchpad_py/agent-4242-0.json   (else the courier socket directory)

Requests are ``('statistics',)`` and ``('tail', 'label/index')``; replies are
``('reply', value)`` with plain dicts and strings. ``LAUNCHPAD_PY_RUN_DIR`` moves the directory.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import stat
import threading
import time

from launchpad_py.courier.transports import uds
from launchpad_py.node_side import control_channel

_log = logging.getLogger(__name__)
RUN_DIR_ENV = 'LAUNCHPAD_PY_RUN_DIR'
_numbers = itertools.count()


def run_dir(create: bool = False) -> str:
    """The private directory of handle files; made (0700) when ``create``.

    Raises PermissionError when it exists but is not ours alone.
    """
    path = os.environ.get(RUN_DIR_ENV)
    if not path:
        runtime = os.environ.get('XDG_RUNTIME_DIR')
        path = (os.path.join(runtime, 'launchpad_py') if runtime and os.path.isdir(runtime)
                else uds.runtime_dir() or f'/tmp/launchpad_py-{os.getuid()}')
    if create:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise PermissionError(f'{path} must be a directory owned by uid {os.getuid()} with mode '
                              f'0700 (it is {oct(info.st_mode & 0o777)}, uid {info.st_uid}); '
                              f'remove it or set {RUN_DIR_ENV}')
    return path


class StatusEndpoint:
    """Answers statistics requests for one controller until ``close``."""

    def __init__(self, controller, directory: str):
        self._controller = controller
        # Short enough for a Unix socket path; the handle file holds the full name.
        safe = ''.join(c if c.isalnum() or c in '-_.' else '_' for c in controller.name)[:40]
        stem = os.path.join(directory, f'{safe}-{os.getpid()}-{next(_numbers)}')
        self.socket_path = stem + '.sock'
        self.handle_path = stem + '.json'
        self._channels: set = set()
        self._lock = threading.Lock()
        self._server = control_channel.ControlServer(self.socket_path, self._serve)
        handle = {'program': controller.name, 'launch_type': controller.launch_type,
                  'pid': os.getpid(), 'socket': self.socket_path,
                  'key': self._server.key.hex(), 'started': time.time()}
        descriptor = os.open(self.handle_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with open(descriptor, 'w') as handle_file:
            json.dump(handle, handle_file)

    def _serve(self, request, channel) -> None:
        with self._lock:
            self._channels.add(channel)
        try:
            answer_until_closed(request, channel, self._answer)
        finally:
            with self._lock:
                self._channels.discard(channel)

    def _answer(self, request):
        kind = request[0] if isinstance(request, tuple) and request else None
        if kind == 'statistics':
            return {'program': self._controller.name,
                    'launch_type': self._controller.launch_type,
                    'running': self._controller.is_running,
                    'nodes': [n.to_dict() for n in self._controller.statistics()]}
        if kind == 'tail' and len(request) == 2:
            try:
                return self._controller.output_tail(str(request[1]))
            except KeyError as exc:
                return {'error': str(exc)}
        return {'error': f'unknown request {request!r}'}

    def close(self) -> None:
        _remove(self.handle_path)
        self._server.close()
        _remove(self.socket_path)
        with self._lock:
            channels = list(self._channels)
        for channel in channels:
            channel.close()


def answer_until_closed(request, channel, answer) -> None:
    """Sends ``('reply', answer(request))`` for this request and each next one, until the peer
    hangs up; then closes the channel. Also serves ``submission/endpoint``'s TCP peers."""
    try:
        while True:
            channel.send('reply', answer(request))
            request = channel.recv()
    except (EOFError, OSError):
        pass
    finally:
        channel.close()


def open_for(controller) -> StatusEndpoint | None:
    """The controller's endpoint; None (with a warning) when no private directory can be had."""
    try:
        return StatusEndpoint(controller, run_dir(create=True))
    except OSError as exc:
        _log.warning('program %r: no status handle file (%s); python -m launchpad_py.cli.status '
                     'cannot find it', controller.name, exc)
        return None


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
