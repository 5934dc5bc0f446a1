"""python -m examples.evolution_strategies [--lp_launch_type=local_mp] [--num_evaluators=4]
                                          [--elastic]

Minimizes the 10-D Rastrigin function with SNES, evaluating each generation
on the evaluator nodes; prints progress every 10 generations. With
``--elastic`` (local_mp or ssh) the evaluator group grows and shrinks every
``--resize_every_s`` while the search runs; the search is the same.
"""

from absl import app, flags

import launchpad_py as lp
from examples.elastic import resize_while_running
from examples.evolution_strategies.program import make_program

NUM_EVALUATORS = flags.DEFINE_integer('num_evaluators', 4, 'Evaluator nodes.')
POPULATION = flags.DEFINE_integer('population', 100, 'Candidates per generation.')
MAX_GENERATIONS = flags.DEFINE_integer('max_generations', 500, 'Stop after this many.')
SEED = flags.DEFINE_integer('seed', 0, 'Seed of the search.')
ELASTIC = flags.DEFINE_bool('elastic', False, 'Grow and shrink the evaluator group while it runs.')
RESIZE_EVERY_S = flags.DEFINE_float('resize_every_s', 1.0, 'Seconds between resizes (--elastic).')
SIMULATION_S = flags.DEFINE_float('simulation_s', 0.0, 'Seconds each evaluation call takes, '
                                  'standing for a simulation.')


def main(argv):
    del argv
    controller = lp.launch(make_program(
        NUM_EVALUATORS.value, population=POPULATION.value, seed=SEED.value,
        max_generations=MAX_GENERATIONS.value, elastic=ELASTIC.value,
        simulation_s=SIMULATION_S.value))
    if ELASTIC.value:
        sizes = [NUM_EVALUATORS.value * 2, max(1, NUM_EVALUATORS.value // 2), NUM_EVALUATORS.value]
        resize_while_running(controller, 'evaluator', sizes, RESIZE_EVERY_S.value)
    controller.wait()


if __name__ == '__main__':
    app.run(main)
