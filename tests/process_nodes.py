"""Node classes for the process-starting tests; importable by node processes."""

from __future__ import annotations

import os
import sys


class Describe:
    """Reports how its process was started."""

    def __init__(self, message=None):
        if message:
            print(message, flush=True)

    def process(self):
        return {'pid': os.getpid(), 'ppid': os.getppid(), 'pgid': os.getpgrp(),
                'sid': os.getsid(0), 'executable': sys.executable,
                'marker': os.environ.get('LP_TEST_MARKER'),
                'pythonpath_marker': os.environ.get('PYTHONLP_TEST')}

    def modules(self):
        return sorted(sys.modules)


def call_until_stopped(server):
    """Calls ``server`` in a loop until the program stops, shrugging off failed calls."""
    import launchpad_py as lp
    client = lp.CourierClient(server.address, timeout=0.5)
    while not lp.wait_for_stop(0.01):
        try:
            client.process()
        except Exception:  # The server may be gone: only the launcher's report matters here.
            pass
