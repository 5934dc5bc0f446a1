"""The submitted controller's door: where ``status``, ``logs`` and ``stop`` reach it over TCP.

The controller of a submitted program runs on a cluster host, so the Unix
socket of ``observability/status_endpoint`` is out of reach of the user's
terminal. This endpoint listens on TCP instead, and every connection must prove
the program's secret before anything is read (``multiprocessing`` challenge,
both ways, in ``node_side/control_channel``). Its address goes to
``endpoint.json`` (0600) in the program's directory::

    ('statistics',)      -> {'pid', 'host',
                             'programs': [{'program', 'running', 'dashboard', 'nodes': [...]}]}
    ('stop', grace)      -> {'stopping': [program names]}: the clean stop of ``lp.stop()``
                            ([] before the script has launched: the caller kills instead)

    endpoint = Endpoint(secret, directory)   # ... the script runs ...
    endpoint.close()
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import threading

from launchpad_py.node_side import control_channel
from launchpad_py.observability import status_endpoint
from launchpad_py.submission import records
from launchpad_py.supervision import controller as controllers


class Endpoint:
    """Answers the user's requests about the programs this process launches, until ``close``."""

    def __init__(self, secret: bytes, directory: str):
        self._server = control_channel.ControlServer(
            ('0.0.0.0', 0), lambda request, channel: status_endpoint.answer_until_closed(
                request, channel, self._answer), family='AF_INET', key=secret)
        self.host, self.port = reachable_address(), self._server.address[1]
        records.write_private(os.path.join(directory, records.ENDPOINT), json.dumps(
            {'host': self.host, 'port': self.port, 'pid': os.getpid()}), replace=True)

    def _answer(self, request):
        kind = request[0] if isinstance(request, tuple) and request else None
        running = controllers.running_programs()
        if kind == 'statistics':
            return {'pid': os.getpid(), 'host': self.host,
                    'programs': [{'program': c.name, 'launch_type': c.launch_type,
                                  'running': c.is_running, 'dashboard': _dashboard(c),
                                  'nodes': [n.to_dict() for n in c.statistics()]}
                                 for c in running]}
        if kind == 'stop' and len(request) == 2:
            grace = request[1] if isinstance(request[1], (int, float)) else None
            for program in running:  # stop() blocks for the grace; the caller need not.
                threading.Thread(target=program.stop, kwargs={'grace': grace},
                                 name=f'lp-submitted-stop-{program.name}', daemon=True).start()
            return {'stopping': [c.name for c in running]}
        return {'error': f'unknown request {request!r}'}

    def close(self) -> None:
        self._server.close()


def _dashboard(program) -> dict | None:
    """Where the program's dashboard listens (loopback here) and its token, if it has one."""
    board = program.dashboard
    return board and {'port': board.port, 'token': board.token}


def reachable_address() -> str:
    """This host's address as the submitting machine reaches it.

    Over ssh, the address the submitter's ssh connected to; in a Slurm job, the
    node's NodeAddr (what slurmctld uses); else what the host name resolves to (in a
    pod, its IP), or if nothing resolves it, the address of the default route's interface.
    """
    ssh = os.environ.get('SSH_CONNECTION', '').split()
    if len(ssh) == 4:
        return ssh[2]
    node = os.environ.get('SLURMD_NODENAME')
    if node:
        try:
            shown = subprocess.run(['scontrol', '-o', 'show', 'node', node], capture_output=True,
                                   text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            shown = ''
        found = re.search(r'\bNodeAddr=(\S+)', shown)
        if found:
            return found.group(1)
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:  # A container whose name nothing resolves (podman's host network).
        return _default_route_address()


def _default_route_address() -> str:
    """The address of the interface the default route leaves by (loopback if none)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as route:
            route.connect(('10.255.255.255', 9))  # Picks a route; sends nothing.
            return route.getsockname()[0]
    except OSError:
        return '127.0.0.1'
