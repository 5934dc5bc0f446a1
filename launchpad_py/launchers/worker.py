"""Entry point of a node process: ``python -m launchpad_py.launchers.worker SPEC``.

It connects back to its launcher, restores the launcher's flags, unpickles
its executable and runs it, reporting ready/failed/finished. When the
launcher goes away (the control connection ends) it kills its own process
group, so nothing outlives the launcher.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys

#: Comma-separated modules imported before any node code (the compatibility runner uses it).
PRELOAD_ENV = 'LAUNCHPAD_PY_PRELOAD'


def _kill_own_group() -> None:
    try:
        os.killpg(os.getpgrp(), signal.SIGKILL)
    finally:
        os._exit(1)


def main(spec_path: str, parent_pid: int | None = None) -> int:
    """Runs the node described by ``spec_path``.

    ``parent_pid``: the process this one must die with when it is not the
    launcher itself (a node forked by ``process_starter``).
    """
    from launchpad_py import node_process
    from launchpad_py.courier import serialization
    from launchpad_py.launchers import control, flag_transfer

    with open(spec_path, 'rb') as spec_file:
        spec = serialization.loads(spec_file.read())
    # Read once: removing it now leaves no pickled code behind, even if the launcher is killed.
    try:
        os.remove(spec_path)
    except OSError:
        pass
    if spec['parent_pid'] is not None:
        node_process.die_with_parent(parent_pid or spec['parent_pid'])
    os.environ.update(spec['env'])
    channel = control.connect_to_launcher(spec['control_address'])
    channel.send('hello', spec['worker_id'], os.getpid(), os.getpgrp())

    def load():
        for module in filter(None, os.environ.get(PRELOAD_ENV, '').split(',')):
            importlib.import_module(module)
        executable = serialization.loads(spec['executable'])
        flag_transfer.restore(spec['flags'], spec['args'])
        return executable

    return node_process.run(channel, spec['program'], spec['bind_host'], load, _kill_own_group,
                            secret=spec['secret'])


if __name__ == '__main__':
    code = main(sys.argv[1])
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)
