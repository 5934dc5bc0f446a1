"""A script that launches without absl's app.run: its --lp_* flags must still count.

Prints 'node in another process: True' under local_mp.
"""

import os

import launchpad_py as lp

LAUNCHER_PID = os.getpid()


def main():
    print('node in another process:', os.getpid() != LAUNCHER_PID, flush=True)
    lp.stop()


program = lp.Program('flags')
program.add_node(lp.PyNode(main), label='main')
lp.launch(program).wait(timeout=60)
