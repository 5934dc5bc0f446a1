"""Three node threads (local_mt) print 200 lines each, as fast as they can, with print()."""

from absl import app, logging

import launchpad_py as lp


def talk(number):
    logging.info('talker %d starts', number)
    for line in range(200):
        print('talker', number, 'line', line, 'x' * 40)


def main(argv):
    program = lp.Program('talk')
    with program.group('talker'):
        for number in range(3):
            program.add_node(lp.PyNode(talk, number))
    lp.launch(program, launch_type='local_mt', dashboard=True).wait(timeout=60)
    print('script done')


if __name__ == '__main__':
    app.run(main)
