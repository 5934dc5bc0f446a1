"""python -m examples.parameter_server [--lp_launch_type=local_mp] [--topology=replicated]

Runs one topology once and prints the total queries per second. For the
scaling sweep (the paper's Figure 2), run ``python -m examples.parameter_server.benchmark``.
"""

from absl import app, flags

import launchpad_py as lp
from examples.parameter_server.program import TOPOLOGIES, make_program

TOPOLOGY = flags.DEFINE_enum('topology', 'single', list(TOPOLOGIES), 'Which topology to run.')
NUM_REQUESTERS = flags.DEFINE_integer('num_requesters', 4, 'Requester nodes.')
NUM_SERVERS = flags.DEFINE_integer('num_servers', 2, 'Server replicas (replicated topology).')
PARAM_SIZE = flags.DEFINE_integer('param_size', 10_000, 'Length of the float32 parameter vector.')
DURATION = flags.DEFINE_float('duration_s', 2.0, 'Seconds each requester reads parameters.')
CHECKPOINT_EVERY = flags.DEFINE_integer(
    'checkpoint_every', 1000, 'Updates between server checkpoints (0: only before a stop).')


def main(argv):
    del argv
    program = make_program(TOPOLOGY.value, NUM_REQUESTERS.value, num_servers=NUM_SERVERS.value,
                           param_size=PARAM_SIZE.value, duration_s=DURATION.value,
                           checkpoint_every=CHECKPOINT_EVERY.value)
    lp.launch(program).wait()


if __name__ == '__main__':
    app.run(main)
