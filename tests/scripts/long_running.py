"""A local_mp program that runs until stopped; prints its node pids as JSON, then waits.

Usage: long_running.py HANDLER_LOG [--lp_termination_notice_secs=N] [--stubborn]
"""

import json
import sys

from absl import app, flags

import launchpad_py as lp

STUBBORN = flags.DEFINE_bool('stubborn', False, 'Add a node that ignores stop requests.')


class Server:
    def ping(self):
        return 'pong'


def log_stop(path, label):
    lp.register_stop_handler(lambda: open(path, 'a').write(label + '\n'))
    lp.wait_for_stop()


def ignore_stop():
    import threading
    threading.Event().wait()  # Never returns: ignores the stop request.


def main(argv):
    program = lp.Program('long_running')
    program.add_node(lp.CourierNode(Server), label='server')
    program.add_node(lp.PyNode(log_stop, argv[1], 'waiter'), label='waiter')
    if STUBBORN.value:
        program.add_node(lp.PyNode(ignore_stop), label='stubborn')
    controller = lp.launch(program, launch_type='local_mp')
    print(json.dumps([s.pid for s in controller.statuses()]), flush=True)
    sys.stdin.readline()  # The test writes a line to ask for lp.stop().
    lp.stop()
    controller.wait()
    print('killed:', ','.join(controller.killed_nodes), flush=True)


if __name__ == '__main__':
    app.run(main)
