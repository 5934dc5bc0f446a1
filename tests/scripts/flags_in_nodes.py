"""Checks that flags parsed by this script reach local_mp nodes.

Usage: flags_in_nodes.py --greeting=VALUE
"""

from absl import app, flags

import launchpad_py as lp

GREETING = flags.DEFINE_string('greeting', 'default', 'A flag defined in __main__.')


def report(group):
    print(f'{group} sees greeting={flags.FLAGS.greeting} '
          f'termination={flags.FLAGS.lp_termination_notice_secs}', flush=True)


def main(argv):
    del argv
    program = lp.Program('flags')
    program.add_node(lp.PyNode(report, 'plain'), label='plain')
    program.add_node(lp.PyNode(report, 'overridden'), label='overridden')
    resources = {'overridden': lp.PythonProcess(args=['--greeting=from_group_args'])}
    lp.launch(program, launch_type='local_mp', local_resources=resources).wait()


if __name__ == '__main__':
    app.run(main)
