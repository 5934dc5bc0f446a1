"""Entry point of a node process: ``python -m launchpad_py.launchers.worker SPEC``.

It connects back to its launcher, restores the launcher's flags, unpickles
its executable and runs it, reporting ready/failed/finished. When the
launcher goes away (the control connection ends) it kills its own process
group, so nothing outlives the launcher.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import traceback


def _die_with_parent(parent_pid: int) -> None:
    """Asks Linux to SIGKILL us when the launcher dies; a backup for the channel watch."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # The launcher died before prctl took effect.
        os._exit(1)


def _kill_own_group() -> None:
    try:
        os.killpg(os.getpgrp(), signal.SIGKILL)
    finally:
        os._exit(1)


def _listen(channel, scope) -> None:
    """Serves the launcher's messages; the end of the channel means the launcher died."""
    while True:
        try:
            message = channel.recv()
        except (EOFError, OSError):
            if not _finished.is_set():
                _kill_own_group()
            return
        if message[0] == 'stop':
            scope.handle_stop()


_finished = threading.Event()


def main(spec_path: str, parent_pid: int | None = None) -> int:
    """Runs the node described by ``spec_path``.

    ``parent_pid``: the process this one must die with when it is not the
    launcher itself (a node forked by ``process_starter``).
    """
    from launchpad_py import runtime
    from launchpad_py.courier import serialization
    from launchpad_py.launchers import control, flag_transfer
    from launchpad_py.program import ExecutionContext

    with open(spec_path, 'rb') as spec_file:
        spec = serialization.loads(spec_file.read())
    if spec['parent_pid'] is not None:
        _die_with_parent(parent_pid or spec['parent_pid'])
    os.environ.update(spec['env'])
    channel = control.connect_to_launcher(spec['control_address'])
    channel.send('hello', spec['worker_id'], os.getpid(), os.getpgrp())
    scope = runtime.ProgramScope(spec['program'], lambda: channel.send('stop_program'))
    runtime.activate(scope)
    runtime.bind_thread(scope)
    threading.Thread(target=_listen, args=(channel, scope), name='lp-control', daemon=True).start()
    # SIGTERM (e.g. from a cluster manager) is a stop request for this node.
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=scope.handle_stop).start())
    try:
        executable = serialization.loads(spec['executable'])
        flag_transfer.restore(spec['flags'], spec['args'])
        context = ExecutionContext(executable.label, executable.index, spec['bind_host'],
                                   lambda: channel.send('ready'), scope.stop_event)
        executable.main(context)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            return _report_failure(channel, exc)
    except BaseException as exc:  # Everything a node raises is reported to the launcher.
        return _report_failure(channel, exc)
    _finished.set()
    channel.send('finished')
    return 0


def _report_failure(channel, exc: BaseException) -> int:
    from launchpad_py.courier import serialization
    text = ''.join(traceback.format_exception(exc))
    sys.stderr.write(text)
    sys.stderr.flush()
    try:
        exception_bytes = serialization.dumps(exc)
    except Exception:
        exception_bytes = None
    _finished.set()
    channel.send('failed', f'{type(exc).__name__}: {exc}', text, exception_bytes)
    return 1


if __name__ == '__main__':
    code = main(sys.argv[1])
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)
