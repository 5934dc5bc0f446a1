"""python -m examples.actor_learner [--lp_launch_type=local_mp] [--num_actors=2] [--elastic]
                                   [--replay=reverb]

Trains CartPole with a JAX learner and CPU actors; the evaluator prints the
greedy policy's mean return every few seconds and ends the program at
--target_return or after --max_env_steps. With ``--elastic`` (local_mp or
ssh) the actor group grows and shrinks every ``--resize_every_s`` while it trains.
"""

import dataclasses

from absl import app, flags

import launchpad_py as lp
from examples.actor_learner.program import Config, cpu_only_resources, make_program
from examples.elastic import resize_while_running

_DEFAULT = Config()
NUM_ACTORS = flags.DEFINE_integer('num_actors', _DEFAULT.num_actors, 'Actor nodes.')
REPLAY = flags.DEFINE_enum('replay', 'learner', ['learner', 'reverb'],
                           'Where actors send unrolls: the learner itself, or a Reverb queue.')
TARGET_RETURN = flags.DEFINE_float('target_return', _DEFAULT.target_return,
                                   'Stop once the greedy policy averages this return.')
MAX_ENV_STEPS = flags.DEFINE_integer('max_env_steps', _DEFAULT.max_env_steps,
                                     'Stop after the learner has used this many env steps.')
SEED = flags.DEFINE_integer('seed', _DEFAULT.seed, 'Seed of the network and the actors.')
RESULT_PATH = flags.DEFINE_string('result_path', None, 'Write the evaluation history here (JSON).')
ELASTIC = flags.DEFINE_bool('elastic', False, 'Grow and shrink the actor group while it trains.')
RESIZE_EVERY_S = flags.DEFINE_float('resize_every_s', 3.0, 'Seconds between resizes (--elastic).')


def main(argv):
    del argv
    config = dataclasses.replace(_DEFAULT, num_actors=NUM_ACTORS.value, seed=SEED.value,
                                 target_return=TARGET_RETURN.value,
                                 max_env_steps=MAX_ENV_STEPS.value)
    program = make_program(config, replay=REPLAY.value, result_path=RESULT_PATH.value,
                           elastic=ELASTIC.value)
    # Separate processes can keep actors off the GPU; threads share one process.
    processes = lp.flags.LAUNCH_TYPE.value in ('local_mp', 'test_mp')
    controller = lp.launch(program, local_resources=cpu_only_resources() if processes else None)
    if ELASTIC.value:
        sizes = [NUM_ACTORS.value * 2, 1, NUM_ACTORS.value]
        resize_while_running(controller, 'actor', sizes, RESIZE_EVERY_S.value)
    controller.wait()


if __name__ == '__main__':
    app.run(main)
