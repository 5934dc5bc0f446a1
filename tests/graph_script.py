"""A launching script for the graph tool's tests: two groups, handles passed both ways."""

from absl import app, flags

import launchpad_py as lp
from tests.observe_nodes import Counted, call_forever

WORKERS = flags.DEFINE_integer('workers', 2, 'Client nodes.')


def main(argv):
    del argv
    program = lp.Program('drawn')
    server = program.add_node(lp.CourierNode(Counted), label='server')
    with program.group('client'):
        for _ in range(WORKERS.value):
            program.add_node(lp.PyNode(call_forever, server))
    lp.launch(program, resources={'client': lp.PythonProcess(env={'ROLE': 'client'})})
    raise AssertionError('the graph tool must stop the script at lp.launch')


if __name__ == '__main__':
    app.run(main)
