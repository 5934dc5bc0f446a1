"""The pod agent: ``python -m launchpad_py.node_side.pod_agent``, the one process of a packed pod.

A group packed N per pod (``KubernetesResources(nodes_per_pod=N)``) gets one
pod per N nodes. Nothing of the launcher reaches a pod's stdin, so the pod
agent dials the launcher instead: it reads its bootstrap from the mounted
Secret (named by ``LAUNCHPAD_PY_POD_AGENT_BOOTSTRAP``), connects to the
launcher's agent listener, proves the listener's key (both ways, before a
byte is decoded), names its pod, and then serves the host agent's line
protocol (``host_agent.py``) on that connection: the launcher asks it to
start, kill and ping its nodes, and it relays their output and exits.

The program secret stays in the Secret: the launcher sends bootstraps without
it over the connection, and the agent adds it to each before forking the
node. The bootstrap file::

    {"launcher": [IP, PORT], "key": HEX, "pod": NAME, "secret": HEX}

When the connection ends (the launcher is gone, or it closed the session at
the program's end) the agent kills its nodes and exits, and so the pod ends.
"""

from __future__ import annotations

import json
import multiprocessing.connection as mpc
import os
import sys

from launchpad_py.node_side import host_agent

#: Names the bootstrap file (as ``launchers/kubernetes/manifests.AGENT_BOOT_ENV``).
BOOT_ENV = 'LAUNCHPAD_PY_POD_AGENT_BOOTSTRAP'


class _PodAgent(host_agent.Agent):
    """A host agent whose nodes get the program secret from the pod, not from the wire."""

    def __init__(self, timeout: float, secret: str):
        super().__init__(timeout)
        self._secret = secret

    def start(self, node_id: int, boot: dict) -> None:
        super().start(node_id, {**boot, 'secret': self._secret})


def _read_boot() -> dict:
    path = os.environ.get(BOOT_ENV)
    try:
        with open(path or '', 'rb') as boot_file:
            return json.load(boot_file)
    except (OSError, ValueError) as exc:
        raise SystemExit(f'launchpad_py pod agent: cannot read its bootstrap {path!r} (named '
                         f'by {BOOT_ENV}): {exc}') from exc


def dial(boot: dict) -> int:
    """Connects to the launcher, proves the key both ways, names the pod; the socket's fd."""
    host, port = boot['launcher']
    try:
        connection = mpc.Client((host, port), family='AF_INET',
                                authkey=bytes.fromhex(boot['key']))
        connection.send(('hello', boot['pod']))
    except (OSError, mpc.AuthenticationError) as exc:
        raise SystemExit(f'launchpad_py pod agent: cannot reach the launcher at {host}:{port}: '
                         f'{type(exc).__name__}: {exc}') from exc
    fd = os.dup(connection.fileno())
    connection.close()
    return fd


def main() -> int:
    boot = _read_boot()
    fd = dial(boot)
    # The connection is the agent's stdin and stdout; nothing else may write to fd 1.
    os.dup2(fd, 0)
    os.dup2(fd, 1)
    os.close(fd)  # Forked nodes must not hold it: its end is how each side sees the other go.
    sys.stdout = sys.stderr
    return host_agent.main(lambda timeout: _PodAgent(timeout, boot['secret']))


if __name__ == '__main__':
    sys.exit(main())
