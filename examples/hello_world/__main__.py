"""python -m examples.hello_world [--lp_launch_type=local_mp]"""

from absl import app

import launchpad_py as lp
from examples.hello_world.program import make_program


def main(argv):
    del argv
    lp.launch(make_program()).wait()


if __name__ == '__main__':
    app.run(main)
