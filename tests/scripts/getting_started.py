"""The getting-started program (docs/getting-started.md), run as a newcomer would.

Actor 0 stops the program after 100 updates while the other actors are still
calling the learner, so their calls meet a learner that is already gone.
Usage: python getting_started.py LAUNCH_TYPE; prints the statuses as JSON.
"""

import json
import sys

import launchpad_py as lp


class Learner:
    def __init__(self):
        self.weights = 0.0

    def update(self, gradient):
        self.weights -= 0.1 * gradient
        return self.weights


class Actor:
    def __init__(self, learner, seed):
        self.learner, self.seed = learner, seed

    def run(self):
        for step in range(10**9):
            self.learner.update(1.0)
            if self.seed == 0 and step == 100:
                lp.stop()
                return


program = lp.Program('agent')
learner = program.add_node(lp.CourierNode(Learner), label='learner')
with program.group('actor'):
    for seed in range(4):
        program.add_node(lp.CourierNode(Actor, learner, seed))
controller = lp.launch(program, launch_type=sys.argv[1])
controller.wait(timeout=60)
print(json.dumps([(s.label, s.index, s.state.value, s.exit_code) for s in controller.statuses()]))
