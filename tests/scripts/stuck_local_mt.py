"""A local_mt program stopped by one of its nodes while another ignores the stop.

Usage: stuck_local_mt.py MODE [--lp_termination_notice_secs=N]
MODE: 'wait' (the script waits on the program), 'return' (it returns right after
lp.launch), 'handler' (a stop handler blocks instead of a node), 'acme' (like Acme: the
learner stops the program, and the actor's executor thread calls it once it is gone),
'ctrl_c' (nothing stops the program: the test sends SIGINT), 'ctrl_c_masked' (the same, but
the main thread blocks SIGINT, so the kernel hands it to another thread and never wakes
the main thread with it), 'removed' (the node that ignores its stop is removed from its
elastic group, then the script stops the program and returns: its thread is left running).
"""

import concurrent.futures
import os
import signal
import sys
import tempfile
import threading
import time

from absl import app

import launchpad_py as lp


def say(line):
    sys.stdout.write(line + '\n')  # One write: lines from several threads stay whole.
    sys.stdout.flush()


def stop_the_program():
    say(f'stop requested at {time.time()}')
    lp.stop()


def ignore_the_stop():
    threading.Event().wait()


def block_in_a_stop_handler():
    lp.register_stop_handler(lambda: threading.Event().wait())
    lp.wait_for_stop()


class Learner:
    def __init__(self):
        self._steps = 0

    def step(self):
        self._steps += 1
        if self._steps == 50:
            stop_the_program()
        return self._steps


def _wait_for_file(path):
    pause, deadline = threading.Event(), time.monotonic() + 30
    while not os.path.exists(path) and time.monotonic() < deadline:
        pause.wait(0.02)


def act(learner, learner_gone):
    """Acme's actors fetch variables on an executor thread and never check for a stop."""
    fetcher = concurrent.futures.ThreadPoolExecutor(1)
    while fetcher.submit(learner.step).result() < 50:
        pass
    _wait_for_file(learner_gone)  # Makes sure the next call finds the learner gone.
    fetcher.submit(learner.step).result()


def main(argv):
    mode = argv[1]
    program = lp.Program('stuck')
    learner_gone = os.path.join(tempfile.mkdtemp(), 'learner_gone')
    if mode == 'removed':
        with program.group('stubborn', elastic=True):
            program.add_node(lp.PyNode(ignore_the_stop))
        controller = lp.launch(program, launch_type='local_mt')
        controller.remove_nodes('stubborn', 1, grace=0.5, timeout=30)
        say('removed')
        controller.stop(timeout=30)
        say('stopped')
        return
    if mode == 'acme':
        learner = program.add_node(lp.CourierNode(Learner), label='learner')
        program.add_node(lp.PyNode(act, learner, learner_gone), label='actor')
    else:
        program.add_node(lp.PyNode(block_in_a_stop_handler if mode == 'handler'
                                   else ignore_the_stop), label='stubborn')
        if not mode.startswith('ctrl_c'):
            program.add_node(lp.PyNode(stop_the_program), label='limiter')
    controller = lp.launch(program, launch_type='local_mt')
    if mode == 'ctrl_c_masked':
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    say('launched')
    if mode == 'acme':
        pause = threading.Event()
        while controller.statuses()[0].state != lp.NodeState.STOPPED:
            pause.wait(0.02)
        open(learner_gone, 'w').close()
    if mode != 'return':
        controller.wait()
        say('wait returned')


if __name__ == '__main__':
    app.run(main)
