"""Entry point of one child of a ``MultiProcessingColocation``.

    python -m launchpad_py.nodes.colocation_child FD

``FD`` is this end of a socket pair to the supervisor, which first sends
``('start', executable_bytes, bind_host, program_name, supervisor_pid, secret)``.
The child dies with its supervisor, and ignores Ctrl-C: the launcher turns
Ctrl-C into a program stop, which reaches the child through the supervisor.
"""

from __future__ import annotations

import multiprocessing.connection as mpc
import os
import signal
import sys


def main(fd: int) -> int:
    from launchpad_py import node_process
    from launchpad_py.courier import serialization

    channel = node_process.Channel(mpc.Connection(fd))
    _, data, bind_host, program_name, supervisor_pid, secret = channel.recv()
    node_process.die_with_parent(supervisor_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return node_process.run(channel, program_name, bind_host, lambda: serialization.loads(data),
                            lambda: os._exit(1), secret=secret)


if __name__ == '__main__':
    code = main(int(sys.argv[1]))
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)
