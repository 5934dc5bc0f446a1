"""The Ray actor that owns one node process, on whichever host Ray placed it.

It runs ``python -m launchpad_py.node_side.remote_node_main`` as its child with
the bootstrap on the child's stdin, which stays open: when the actor dies (killed,
its host lost, its driver gone), the pipe closes and the node ends its process
group, as it does when an ssh connection drops. The child inherits the actor's
environment, so ``CUDA_VISIBLE_DEVICES`` is what Ray assigned and the runtime_env
applies. This module is imported inside Ray's worker processes; it needs nothing
of the launcher.
"""

from __future__ import annotations

import os
import subprocess
import sys

#: The variable in which the node finds its host's address, which it reports for statuses.
HOST_ENV = 'LAUNCHPAD_PY_RAY_HOST'


class NodeHost:
    """One node process, started by ``run``; Ray kills the actor to kill the node."""

    def __init__(self) -> None:
        self._process: subprocess.Popen | None = None

    def run(self, boot_line: bytes, env: dict[str, str]):
        """Starts the node; yields where it runs, then its output lines, then its exit code."""
        import ray
        context = ray.get_runtime_context()
        host = ray.util.get_node_ip_address()
        yield {'node_id': context.get_node_id(), 'host': host,
               'gpus': os.environ.get('CUDA_VISIBLE_DEVICES')}
        paths = [p for p in env.get('PYTHONPATH', '').split(os.pathsep) if os.path.isdir(p)]
        paths += [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]
        child_env = {**os.environ, **env, HOST_ENV: host,
                     'PYTHONPATH': os.pathsep.join(dict.fromkeys(paths))}
        self._process = subprocess.Popen(
            [sys.executable, '-m', 'launchpad_py.node_side.remote_node_main'],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=child_env)
        self._process.stdin.write(boot_line)
        self._process.stdin.flush()
        for line in iter(self._process.stdout.readline, b''):
            yield line
        yield self._process.wait()
