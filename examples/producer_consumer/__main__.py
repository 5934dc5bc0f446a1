"""python -m examples.producer_consumer [--lp_launch_type=local_mp] [--num_producers=2]"""

from absl import app, flags

import launchpad_py as lp
from examples.producer_consumer.program import make_program

NUM_PRODUCERS = flags.DEFINE_integer('num_producers', 2, 'How many Range producers.')
SIZE = flags.DEFINE_integer('size', 1000, 'How many numbers each producer holds.')


def main(argv):
    del argv
    lp.launch(make_program(NUM_PRODUCERS.value, SIZE.value)).wait()


if __name__ == '__main__':
    app.run(main)
