"""A coordinator calls its workers; worker 1's step() raises FloatingPointError.

Usage: python worker_raises.py LAUNCH_TYPE [unknown]; with 'unknown' the
coordinator calls a method the workers lack instead.
"""

import sys

import launchpad_py as lp


class Worker:
    def __init__(self, index):
        self.index = index

    def step(self):
        if self.index == 1:
            raise FloatingPointError('loss is nan')
        return self.index


def coordinate(workers):
    for worker in workers:
        if sys.argv[2:] == ['unknown']:
            worker.stepp()
        worker.step()
    lp.stop()


program = lp.Program('pbt')
with program.group('worker'):
    workers = [program.add_node(lp.CourierNode(Worker, index)) for index in range(2)]
program.add_node(lp.PyNode(coordinate, workers), label='coordinator')
lp.launch(program, launch_type=sys.argv[1]).wait()
