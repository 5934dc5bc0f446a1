"""``dashboard ID`` for a Kubernetes program: a local port relayed to the dashboard in its pod.

The dashboard listens on the controller pod's loopback, which nothing outside
the pod reaches. The controller's endpoint (``endpoint``), which does listen on
the pod's IP, relays it: each browser connection to our local port becomes one
connection to the endpoint that proves the program's secret, asks
``('relay_dashboard',)``, and from then on carries the HTTP bytes. How we reach
the endpoint is the route:

- ``direct``: TCP to the pod's IP (this machine routes to the pod network);
- ``api``: the API server's ``pods/portforward`` to the endpoint's port (only the
  API server is needed, as for ``kubectl port-forward``).

    relay = DashboardRelay(connect, secret)   # connect() -> a socket to the endpoint
    relay.local_port; relay.close()
"""

from __future__ import annotations

import os
import socket
import threading
from typing import Callable

from launchpad_py import errors
from launchpad_py.submission import client, records, splice
from launchpad_py.submission.platforms import kubernetes

_RELAY_TIMEOUT_S = 30.0


def open_relay(connect: Callable[[], socket.socket], secret: bytes, where: str) -> tuple[
        socket.socket, dict]:
    """A connection to the endpoint that now carries the dashboard's bytes, and its
    ``{'port', 'token'}``; ProgramError when the program serves no dashboard."""
    connection, reply = client.converse(connect(), secret, ('relay_dashboard',),
                                        _RELAY_TIMEOUT_S, where)
    try:
        if 'relaying' not in reply:
            raise errors.ProgramError(f'{where}: {reply.get("error", reply)}; launch the program '
                                      'with dashboard=True, or pass --lp_dashboard to the script')
        sock = socket.socket(fileno=os.dup(connection.fileno()))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, bytes(16))  # Wait for pages.
        return sock, reply['relaying']
    finally:
        connection.close()


class DashboardRelay:
    """Listens on ``127.0.0.1:local_port`` and relays each connection, until ``close``."""

    def __init__(self, connect: Callable[[], socket.socket], secret: bytes, where: str,
                 local_port: int = 0):
        self._connect, self._secret, self._where = connect, secret, where
        first, board = open_relay(connect, secret, where)  # Fails here, not in a browser.
        first.close()
        self.token = board['token']
        self._listener = socket.create_server(('127.0.0.1', local_port))
        self.local_port = self._listener.getsockname()[1]
        self._closed = threading.Event()
        threading.Thread(target=self._accept_loop, name='lp-dashboard-relay',
                         daemon=True).start()

    def _accept_loop(self) -> None:
        while True:
            try:
                browser, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(browser,), name='lp-dashboard-conn',
                             daemon=True).start()

    def _serve(self, browser: socket.socket) -> None:
        try:
            remote, _ = open_relay(self._connect, self._secret, self._where)
        except (OSError, errors.LaunchpadError):
            browser.close()  # The program ended, or the route went: the browser sees it.
            return
        splice.splice(browser, remote)

    def wait(self, timeout: float | None = None) -> int | None:
        """0 once closed; None while it still relays after ``timeout`` seconds."""
        return 0 if self._closed.wait(timeout) else None

    def close(self) -> None:
        self._closed.set()
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # Wakes the accept loop.
        except OSError:
            pass
        self._listener.close()


ROUTES = ('direct', 'api')
_DIRECT_TIMEOUT_S = 3.0


def open_for(program, local_port: int = 0, via: str | None = None) -> DashboardRelay:
    """The relay to the dashboard of the submitted Kubernetes ``program`` (a
    ``SubmittedProgram``), by route ``via``: 'direct', 'api', or None (direct when the
    pod's IP answers within a few seconds, else the API server)."""
    if via not in (None, *ROUTES):
        raise errors.ProgramError(f'dashboard {program.id}: --via must be one of {ROUTES} '
                                  f'(got {via!r})')
    state = program.state()
    if state != 'running':
        hint = ('try again once `status` says running' if state in ('pending', 'submitting')
                else 'it has no dashboard any more')
        raise errors.ProgramError(f'dashboard {program.id}: the controller is {state}; {hint}')
    found = kubernetes.controller_pod(program.record)
    if found is None:
        raise client.NotReachableError(f'dashboard {program.id}: the controller pod has not '
                                       'opened its endpoint yet; try again in a moment')
    pod, host, port = found
    secret = records.secret_of(program.record)
    if via != 'api':
        try:
            socket.create_connection((host, port), timeout=_DIRECT_TIMEOUT_S).close()
            return DashboardRelay(lambda: socket.create_connection((host, port), timeout=10),
                                  secret, f'pod {pod} at {host}:{port}', local_port)
        except OSError as exc:
            if via == 'direct':
                raise client.NotReachableError(
                    f'dashboard {program.id}: no route to pod {pod} at {host}:{port} ({exc}); '
                    'leave out --via to go through the API server') from None
    return DashboardRelay(lambda: kubernetes.open_port(program.record, pod, port), secret,
                          f'pod {pod} port {port} through the API server', local_port)
