"""``dashboard ID``: a local port forward, over ssh, to the dashboard of a submitted program.

The dashboard binds loopback on the host the controller runs on (see
``observability/dashboard``), so it is reached the way a user reaches any
such port: ``ssh -L``. The ssh client runs ``cat`` there with our pipe as its
stdin, so when the process that opened the forward ends, however it ends, the
pipe closes, ``cat`` ends, and so does the ssh client: no forward outlives us.

    forward = Forward(ssh_host, remote_port=8765)   # returns once the local port answers
    forward.local_port; forward.close()
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time

import portpicker

from launchpad_py import errors
from launchpad_py.launchers.ssh.host import SshHost

_READY_TIMEOUT_S = 30.0


class Forward:
    """``ssh -L local:127.0.0.1:remote host``, held open until ``close`` or our end."""

    def __init__(self, host: SshHost, remote_port: int, local_port: int = 0):
        self.local_port = local_port or portpicker.pick_unused_port()
        spec = f'127.0.0.1:{self.local_port}:127.0.0.1:{int(remote_port)}'
        options = [*(host.ssh_options or ()), '-o', 'ExitOnForwardFailure=yes', '-L', spec]
        argv = SshHost(host.host, port=host.port, user=host.user,
                       ssh_options=options).ssh_argv('exec cat >/dev/null')
        self._process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, text=True)
        try:
            self._wait_until_open(host.name)
        except BaseException:
            self.close()
            raise

    def _wait_until_open(self, name: str) -> None:
        deadline, pause = time.monotonic() + _READY_TIMEOUT_S, threading.Event()
        while self._process.poll() is None and time.monotonic() < deadline:
            try:
                socket.create_connection(('127.0.0.1', self.local_port), timeout=1).close()
                return
            except OSError:
                pause.wait(0.1)
        said = self._process.stderr.read() if self._process.poll() is not None else 'no answer'
        raise errors.LaunchError(f'could not forward 127.0.0.1:{self.local_port} to the '
                                 f'dashboard on {name}: {said.strip()}')

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        if self._process.stdin:
            self._process.stdin.close()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
