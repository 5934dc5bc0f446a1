"""Written against DeepMind Launchpad: the smallest program, one node that prints."""

from absl import app

import launchpad as lp


class Greeter:
    def run(self):
        print('Hello from a Launchpad node', flush=True)


def main(_):
    program = lp.Program('hello_world')
    program.add_node(lp.PyClassNode(Greeter), label='greeter')
    lp.launch(program)


if __name__ == '__main__':
    app.run(main)
