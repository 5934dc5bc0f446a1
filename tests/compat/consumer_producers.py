"""Written against DeepMind Launchpad: producers do work, a consumer gathers it with futures."""

from absl import app, flags, logging

import launchpad as lp

NUM_PRODUCERS = flags.DEFINE_integer('num_producers', 3, 'How many producers.')


class Producer:
    def work(self, context):
        return context * 10


class Consumer:
    def __init__(self, producers):
        self._producers = producers

    def run(self):
        totals = []
        for step in range(5):
            futures = [p.futures.work(step + i) for i, p in enumerate(self._producers)]
            totals.append(sum(f.result() for f in futures))
        logging.info('totals: %s', totals)
        print('consumer totals', totals, flush=True)
        lp.stop()


def make_program(num_producers):
    program = lp.Program('consumer_producers')
    with program.group('producer'):
        producers = [program.add_node(lp.CourierNode(Producer)) for _ in range(num_producers)]
    program.add_node(lp.CourierNode(Consumer, producers=producers), label='consumer')
    return program


def main(_):
    lp.launch(make_program(NUM_PRODUCERS.value))


if __name__ == '__main__':
    app.run(main)
