"""Written against DeepMind Launchpad: actors colocated as processes of one node.

Acme's make_distributed_experiment(multiprocessing_colocate_actors=True)
builds its actors this way, from a library that imports `launchpad` itself.
"""

from absl import app

import launchpad as lp
from acme_like_agent import Actor, Counter


def main(_):
    program = lp.Program('colocated_actors')
    counter = program.add_node(lp.CourierNode(Counter), label='counter')
    actors = [lp.CourierNode(Actor, counter, index) for index in range(2)]
    program.add_node(lp.MultiProcessingColocation(actors), label='actor')
    lp.launch(program)


if __name__ == '__main__':
    app.run(main)
