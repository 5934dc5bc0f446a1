"""Node classes and functions used by the tests, importable from node processes.

numpy is imported inside the methods that use it: ``bench/scale_kubernetes.py`` runs
``serve_forever`` in a thousand pods, whose memory must be what a user's node costs.
"""

from __future__ import annotations

import os
import threading

import launchpad_py as lp


class Pinger:
    """A courier object with a few kinds of methods."""

    def ping(self, value=None):
        return ('pong', value)

    def double(self, array):
        import numpy as np  # noqa: PLC0415 (see the module docstring)
        return np.asarray(array) * 2

    def make_array(self, n):
        import numpy as np  # noqa: PLC0415 (see the module docstring)
        return np.arange(n, dtype=np.float32)

    def fail(self, message):
        raise KeyError(message)

    def _hidden(self):
        return 'secret'


def stop_from_side_thread():
    """Calls lp.stop() from a thread the node starts itself."""
    thread = threading.Thread(target=lp.stop)
    thread.start()
    thread.join()
    lp.wait_for_stop()


def crash(message):
    raise ValueError(message)


def record_stop_handler_calls(path):
    """Registers two handlers that append to ``path`` (made on the node's host if need be: it
    may share nothing with the test); waits for the stop."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    lp.register_stop_handler(lambda: _append(path, 'first'))
    lp.register_stop_handler(lambda: _append(path, 'second'))
    with open(path + '.registered', 'w') as marker:
        marker.write('yes')
    lp.wait_for_stop()


def _append(path, text):
    with open(path, 'a') as f:
        f.write(text + '\n')


def serve_forever():
    lp.wait_for_stop()


def hard_crash(code):
    """Dies without Python's cleanup, as a segfault or OOM kill would."""
    import os
    import sys
    print('about to crash', flush=True)
    sys.stderr.flush()
    os._exit(code)


def print_environment(names):
    import os
    print({name: os.environ.get(name) for name in names}, flush=True)
    lp.wait_for_stop()


class BrokenConstructor:
    def __init__(self):
        print('constructor output before failing', flush=True)
        raise RuntimeError('constructor cannot start')


class Greeter:
    def greet(self):
        return 'hello'


class WithRun:
    """A courier object whose run() records that it ran, then waits for the stop."""

    def __init__(self, peers, timeout=None):
        self.peers, self.timeout, self.ran = peers, timeout, False

    def run(self):
        self.ran = True
        lp.wait_for_stop()

    def did_run(self):
        return self.ran

    def peer_answers(self):
        """Calls every client found in the nested arguments."""
        return [self.peers['list'][0].ping('a'), self.peers['tuple'][0][0].ping('b')]

    def timeout_seen(self):
        return self.timeout


def stop_program():
    lp.stop()


class SlowGreeter(Greeter):
    """A constructor that takes a while (the behaviour under test, not synchronization)."""

    def __init__(self, seconds):
        import time
        time.sleep(seconds)


class Echo:
    """Returns what it is given, with its type name."""

    def echo(self, value):
        return value, type(value).__name__


class Toucher:
    """A courier object whose method leaves a trace: it creates the file it is given."""

    def touch(self, path: str) -> str:
        with open(path, 'w'):
            pass
        return path
