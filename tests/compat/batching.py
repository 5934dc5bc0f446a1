"""Written against DeepMind Launchpad: a batched handler serving several clients.

Like the original's batching example, each caller sends a list and the
handler receives the list of the callers' lists. The last caller to finish
stops the program, so no caller is still calling when the server stops.
"""

import threading

from absl import app, flags

import launchpad as lp
import numpy as np

NUM_CLIENTS = flags.DEFINE_integer('num_clients', 3, 'How many clients.')


class Caller:
    def __init__(self, client_id, server):
        self._client_id, self._server = client_id, server

    def run(self):
        for x in range(self._client_id, self._client_id + 5):
            result = self._server.compute([x, x + 1])
            assert int(result) == 2 * x + 1, result
        print(f'caller {self._client_id} done', flush=True)
        if self._server.finished() == 0:
            lp.stop()


class Summer:
    """Adds the two numbers each caller sends; callers' calls arrive together, batched."""

    def __init__(self, num_callers):
        self._running = num_callers
        self._lock = threading.Lock()
        self.compute = lp.batched_handler(batch_size=num_callers)(self.compute)

    def compute(self, values):
        # One [x, x + 1] list per caller in the batch: lists are not stacked.
        return np.sum(values, axis=1)

    def finished(self):
        """How many callers are still running once this one is done."""
        with self._lock:
            self._running -= 1
            return self._running


def main(_):
    program = lp.Program('batching')
    server = program.add_node(lp.CourierNode(Summer, NUM_CLIENTS.value), label='server')
    with program.group('clients'):
        for client_id in range(NUM_CLIENTS.value):
            program.add_node(lp.CourierNode(Caller, client_id, server))
    lp.launch(program)


if __name__ == '__main__':
    app.run(main)
