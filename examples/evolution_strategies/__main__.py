"""python -m examples.evolution_strategies [--lp_launch_type=local_mp] [--num_evaluators=4]

Minimizes the 10-D Rastrigin function with SNES, evaluating each generation
on the evaluator nodes; prints progress every 10 generations.
"""

from absl import app, flags

import launchpad_py as lp
from examples.evolution_strategies.program import make_program

NUM_EVALUATORS = flags.DEFINE_integer('num_evaluators', 4, 'Evaluator nodes.')
POPULATION = flags.DEFINE_integer('population', 100, 'Candidates per generation.')
MAX_GENERATIONS = flags.DEFINE_integer('max_generations', 500, 'Stop after this many.')
SEED = flags.DEFINE_integer('seed', 0, 'Seed of the search.')


def main(argv):
    del argv
    lp.launch(make_program(NUM_EVALUATORS.value, population=POPULATION.value, seed=SEED.value,
                           max_generations=MAX_GENERATIONS.value)).wait()


if __name__ == '__main__':
    app.run(main)
