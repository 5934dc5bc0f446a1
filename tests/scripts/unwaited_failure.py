"""A script that launches a failing program and never calls wait(): it must exit 1."""

import sys

import launchpad_py as lp


def fail():
    raise RuntimeError('nobody waits for me')


program = lp.Program('unwaited')
program.add_node(lp.PyNode(fail), label='failer')
lp.launch(program, launch_type=sys.argv[1])
