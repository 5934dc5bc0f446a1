"""Entry point of a node process: ``python -m launchpad_py.node_side.local_node_main SPEC [FD]``.

It reads its spec, talks to its launcher over the control channel (the
socket ``FD`` its launcher handed it, or for tmux windows a connection to the
launcher's control socket), restores the launcher's flags, unpickles its
executable and runs it, reporting ready/failed/finished. When the launcher
goes away (the channel ends) it kills its own process group, so nothing
outlives the launcher.
"""

from __future__ import annotations

import multiprocessing.connection as mpc
import os
import signal
import sys


def _kill_own_group() -> None:
    try:
        from launchpad_py.courier.transports import uds_server
        uds_server.remove_socket_files()  # SIGKILL would leave them behind.
        os.killpg(os.getpgrp(), signal.SIGKILL)
    finally:
        os._exit(1)


def main(spec_path: str, control_fd: int | None = None, die_with_parent: bool = True) -> int:
    """Runs the node described by ``spec_path``.

    ``die_with_parent``: also ask the kernel to end us with the launcher when it
    is our parent (not so for a node forked by ``process_starter``).
    """
    from launchpad_py.node_side import flag_transfer, node_process
    from launchpad_py.node_side.reporting import node_logging
    from launchpad_py.courier import serialization
    from launchpad_py.node_side import control_channel

    with open(spec_path, 'rb') as spec_file:
        spec = serialization.loads(spec_file.read())
    # Read once: removing it now leaves no pickled code behind, even if the launcher is killed.
    try:
        os.remove(spec_path)
    except OSError:
        pass
    if die_with_parent and spec['parent_pid'] is not None:
        node_process.die_with_parent(spec['parent_pid'])
    os.environ.update(spec['env'])
    if control_fd is None:
        channel = control_channel.connect_to_launcher(spec['control_address'])
    else:  # The node's own subprocesses must not hold the channel open after it ends.
        os.set_inheritable(control_fd, False)
        channel = node_process.Channel(mpc.Connection(control_fd))
    channel.send('hello', spec['worker_id'], os.getpid(), os.getpgrp())

    def load():
        executable = serialization.loads(spec['executable'])
        setup = flag_transfer.restore(spec['flags'], spec['args'])
        # The launcher labels this process's output lines itself.
        node_logging.configure(setup, f'{executable.label}/{executable.index}')
        return executable

    return node_process.run(channel, spec['program'], spec['bind_host'], load, _kill_own_group,
                            secret=spec['secret'], addresses=spec['addresses'])


if __name__ == '__main__':
    code = main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None)
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)
