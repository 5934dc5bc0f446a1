"""The Ray actor that owns node processes, on whichever host Ray placed it.

An actor holds one node, or ``RayResources(nodes_per_actor=k)`` nodes of a group: a
Ray worker process costs far more memory than a node, so packing is what lets
hundreds of nodes fit on a few hosts. ``start`` runs ``python -m
launchpad_py.node_side.remote_node_main`` as its child with the bootstrap on the
child's stdin, which stays open: when the actor dies (killed, its host lost, its
driver gone), the pipe closes and the node ends its process group, as it does when
an ssh connection drops. The child inherits the actor's environment, so the
runtime_env applies and ``CUDA_VISIBLE_DEVICES`` is what Ray assigned (split
evenly between the actor's nodes when it holds several). ``output`` hands the
launcher a node's output in batches (a long poll rather than a streaming generator:
Ray Client, ``ray://``, has no streaming actor methods). This module is imported
inside Ray's worker processes; it needs nothing of the launcher.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

#: The variable in which the node finds its host's address, which it reports for statuses.
HOST_ENV = 'LAUNCHPAD_PY_RAY_HOST'


def share_of_gpus(gpus: str | None, slot: int, slots: int) -> str | None:
    """The GPUs of node ``slot`` of ``slots`` in an actor Ray gave ``gpus``: an even share
    when they divide evenly, else all of them (fractional GPUs are shared anyway)."""
    if gpus is None or slots == 1:
        return gpus
    ids = [gpu for gpu in gpus.split(',') if gpu]
    if not ids or len(ids) % slots:
        return gpus
    each = len(ids) // slots
    return ','.join(ids[slot * each:(slot + 1) * each])


class _Node:
    """One node process and the output it has written that nobody has fetched yet."""

    def __init__(self, process: subprocess.Popen, changed: threading.Condition):
        self.process, self.lines, self.code, self.done = process, [], None, False
        self._changed = changed
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in iter(self.process.stdout.readline, b''):
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()
        code = self.process.wait()
        with self._changed:
            self.code, self.done = code, True
            self._changed.notify_all()


class NodeHost:
    """Node processes started by ``start``, each under a key unique to that start; Ray kills
    the actor to kill them all, ``stop_node`` ends one."""

    def __init__(self) -> None:
        self._nodes: dict[str, _Node] = {}
        self._changed = threading.Condition()

    def start(self, key: str, boot_line: bytes, env: dict[str, str], slot: int = 0,
              slots: int = 1) -> dict:
        """Starts node ``key``; returns where it runs (Ray node id, host address, its GPUs)."""
        import ray
        host = ray.util.get_node_ip_address()
        paths = [p for p in env.get('PYTHONPATH', '').split(os.pathsep) if os.path.isdir(p)]
        paths += [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]
        child_env = {**os.environ, **env, HOST_ENV: host,
                     'PYTHONPATH': os.pathsep.join(dict.fromkeys(paths))}
        gpus = share_of_gpus(os.environ.get('CUDA_VISIBLE_DEVICES'), slot, slots)
        if gpus is not None and 'CUDA_VISIBLE_DEVICES' not in env:
            child_env['CUDA_VISIBLE_DEVICES'] = gpus
        process = subprocess.Popen(
            [sys.executable, '-m', 'launchpad_py.node_side.remote_node_main'],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=child_env)
        process.stdin.write(boot_line)
        process.stdin.flush()
        with self._changed:
            self._nodes[key] = _Node(process, self._changed)
        return {'node_id': ray.get_runtime_context().get_node_id(), 'host': host,
                'gpus': child_env.get('CUDA_VISIBLE_DEVICES')}

    def output(self, key: str, wait_s: float) -> tuple[list[bytes], int | None, bool]:
        """Node ``key``'s lines since the last call (waiting up to ``wait_s`` for one), its
        exit code, and whether it has ended (then these are its last lines, and the actor
        forgets it)."""
        with self._changed:
            node = self._nodes[key]
            self._changed.wait_for(lambda: node.lines or node.done, timeout=wait_s)
            lines, node.lines = node.lines, []
            if node.done:
                del self._nodes[key]
            return lines, node.code, node.done

    def stop_node(self, key: str) -> None:
        """Ends node ``key`` as a lost launcher would: its stdin closes, it ends its group."""
        with self._changed:
            node = self._nodes.get(key)
        if node is not None and node.process.poll() is None:
            try:
                node.process.stdin.close()
            except OSError:
                pass


def remove_private_checkpoints(program_name: str, secret: bytes) -> None:
    """A Ray task on a host the program's nodes ran on, once it is over: removes the launch's
    private checkpoint directory there (``launchers/ray/checkpoint_cleanup.py``)."""
    from launchpad_py.node_side import checkpoints
    checkpoints.remove_private_root(program_name, secret)
