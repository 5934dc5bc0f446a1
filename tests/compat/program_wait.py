"""Written against DeepMind Launchpad: the four ways a node can wait for the stop."""

import threading
import time

from absl import app, logging

import launchpad as lp


def poll_wait_for_stop():
    while not lp.wait_for_stop(0.2):
        logging.info('still running')
    print('poll_wait_for_stop ended cleanly', flush=True)


def block_in_wait_for_stop():
    lp.wait_for_stop()
    print('wait_for_stop ended cleanly', flush=True)


def wait_on_stop_event():
    lp.stop_event().wait()
    print('stop_event ended cleanly', flush=True)


def ignore_the_stop():
    threading.Event().wait()  # Never returns: killed after the grace period.


def stop_soon():
    time.sleep(0.5)
    lp.stop()


def make_program():
    program = lp.Program('program_wait')
    program.add_node(lp.CourierNode(poll_wait_for_stop), label='poll')
    program.add_node(lp.CourierNode(block_in_wait_for_stop), label='block')
    program.add_node(lp.CourierNode(wait_on_stop_event), label='event')
    program.add_node(lp.CourierNode(ignore_the_stop), label='stubborn')
    program.add_node(lp.CourierNode(stop_soon), label='stopper')
    return program


def main(_):
    for attempt in range(2):
        controller = lp.launch(make_program())
        controller.wait()
        print(f'program finished ({attempt})', flush=True)


if __name__ == '__main__':
    app.run(main)
