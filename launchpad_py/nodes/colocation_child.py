"""Entry point of one child of a ``MultiProcessingColocation``.

    python -m launchpad_py.nodes.colocation_child FD

``FD`` is this end of a socket pair to the supervisor, which first sends
``('start', executable_bytes, bind_host, program_name, supervisor_pid, setup,
label_lines, secret, addresses)`` (``addresses``: its own, known when it restarts): ``setup`` holds the supervisor's flags and logging setup,
``label_lines`` says whether this child labels its log lines itself.
The child dies with its supervisor, and ignores Ctrl-C: the launcher turns
Ctrl-C into a program stop, which reaches the child through the supervisor.
"""

from __future__ import annotations

import multiprocessing.connection as mpc
import os
import signal
import sys


def main(fd: int) -> int:
    from launchpad_py.node_side import flag_transfer, node_process
    from launchpad_py.node_side.reporting import node_logging
    from launchpad_py.courier import serialization

    channel = node_process.Channel(mpc.Connection(fd))
    _, data, bind_host, program_name, supervisor_pid, setup, label_lines, secret, addresses = (
        channel.recv())
    node_process.die_with_parent(supervisor_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def load():
        executable = serialization.loads(data)
        logging_setup = flag_transfer.restore(setup, [])
        node_logging.configure(logging_setup, f'{executable.label}/{executable.index}',
                               label_lines_here=label_lines)
        return executable

    return node_process.run(channel, program_name, bind_host, load, _supervisor_gone,
                            secret=secret, addresses=addresses)


def _supervisor_gone() -> None:
    from launchpad_py.courier.transports import uds_server
    uds_server.remove_socket_files()  # os._exit runs no atexit hook.
    os._exit(1)


if __name__ == '__main__':
    code = main(int(sys.argv[1]))
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)
