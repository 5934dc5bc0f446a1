"""The Ray actor that owns one node process, on whichever host Ray placed it.

``start`` runs ``python -m launchpad_py.node_side.remote_node_main`` as its child with
the bootstrap on the child's stdin, which stays open: when the actor dies (killed, its
host lost, its driver gone), the pipe closes and the node ends its process group, as it
does when an ssh connection drops. The child inherits the actor's environment, so
``CUDA_VISIBLE_DEVICES`` is what Ray assigned and the runtime_env applies. ``output``
hands the launcher the node's output in batches (a long poll rather than a streaming
generator: Ray Client, ``ray://``, has no streaming actor methods). This module is
imported inside Ray's worker processes; it needs nothing of the launcher.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

#: The variable in which the node finds its host's address, which it reports for statuses.
HOST_ENV = 'LAUNCHPAD_PY_RAY_HOST'


class NodeHost:
    """One node process, started by ``start``; Ray kills the actor to kill the node."""

    def __init__(self) -> None:
        self._lines: list[bytes] = []
        self._code: int | None = None
        self._done = False
        self._changed = threading.Condition()

    def start(self, boot_line: bytes, env: dict[str, str]) -> dict:
        """Starts the node; returns where it runs (Ray node id, host address, GPUs)."""
        import ray
        host = ray.util.get_node_ip_address()
        paths = [p for p in env.get('PYTHONPATH', '').split(os.pathsep) if os.path.isdir(p)]
        paths += [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]
        child_env = {**os.environ, **env, HOST_ENV: host,
                     'PYTHONPATH': os.pathsep.join(dict.fromkeys(paths))}
        process = subprocess.Popen(
            [sys.executable, '-m', 'launchpad_py.node_side.remote_node_main'],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=child_env)
        process.stdin.write(boot_line)
        process.stdin.flush()
        threading.Thread(target=self._read, args=(process,), daemon=True).start()
        return {'node_id': ray.get_runtime_context().get_node_id(), 'host': host,
                'gpus': os.environ.get('CUDA_VISIBLE_DEVICES')}

    def _read(self, process: subprocess.Popen) -> None:
        for line in iter(process.stdout.readline, b''):
            with self._changed:
                self._lines.append(line)
                self._changed.notify_all()
        code = process.wait()
        with self._changed:
            self._code, self._done = code, True
            self._changed.notify_all()

    def output(self, wait_s: float) -> tuple[list[bytes], int | None, bool]:
        """The lines since the last call (waiting up to ``wait_s`` for one), the exit code,
        and whether the node has ended (then these are its last lines)."""
        with self._changed:
            self._changed.wait_for(lambda: self._lines or self._done, timeout=wait_s)
            lines, self._lines = self._lines, []
            return lines, self._code, self._done
