"""A library written against DeepMind Launchpad, as Acme is: it imports `launchpad` itself.

Node processes unpickle these classes by reference, so they import this
module, and with it `launchpad`.
"""

import threading

import launchpad as lp


class Counter:
    def __init__(self):
        self._lock = threading.Lock()
        self._total = 0

    def add(self, n):
        with self._lock:
            self._total += n
            return self._total


class Actor:
    def __init__(self, counter, index):
        self._counter = counter
        self._index = index

    def run(self):
        total = self._counter.add(1)
        print(f'actor {self._index} counted', flush=True)
        if total == 2:
            lp.stop()


class SlowToStop:
    """Takes 30 s to stop, as Acme's actors can (their Reverb adder flushes to a stopped server)."""

    def __init__(self):
        lp.register_stop_handler(lambda: threading.Event().wait(30))

    def ping(self):
        return 'pong'


def stop_once_built(handles):
    for handle in handles:
        handle.ping()
    print('both built; stopping', flush=True)
    lp.stop()
