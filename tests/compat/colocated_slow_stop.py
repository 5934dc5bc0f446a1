"""Written against DeepMind Launchpad: colocated processes slower to stop than the grace period."""

from absl import app

import launchpad as lp
from acme_like_agent import SlowToStop, stop_once_built


def main(_):
    program = lp.Program('colocated_slow_stop')
    nodes = [lp.CourierNode(SlowToStop) for _ in range(2)]
    handles = [node.create_handle() for node in nodes]
    program.add_node(lp.MultiProcessingColocation(nodes), label='actor')
    program.add_node(lp.PyNode(stop_once_built, handles), label='limiter')
    lp.launch(program)


if __name__ == '__main__':
    app.run(main)
