"""Written against DeepMind Launchpad: a batched handler serving several clients."""

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
        lp.stop()


class Summer:
    """Adds the two numbers each caller sends; callers' calls arrive together, batched."""

    def __init__(self, batch_size):
        self.batches = 0
        self.compute = lp.batched_handler(batch_size=batch_size)(self.compute)

    def compute(self, values):
        # A list argument is batched element-wise: values[0] holds every caller's first number.
        self.batches += 1
        return np.asarray(values[0]) + np.asarray(values[1])


def main(_):
    program = lp.Program('batching')
    server = program.add_node(lp.CourierNode(Summer, NUM_CLIENTS.value), label='server')
    with program.group('clients'):
        for client_id in range(NUM_CLIENTS.value):
            program.add_node(lp.CourierNode(Caller, client_id, server))
    lp.launch(program)


if __name__ == '__main__':
    app.run(main)
