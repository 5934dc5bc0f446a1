"""Launching scripts that tests/test_submit.py submits (run as ``python submit_scripts.py KIND``).

``ticker``: one node printing ``tick N`` every 0.2 s until the program is stopped
(``lp.wait_for_stop``), in a program named ``ticker``; ``short``: a node that
prints ``done`` and returns, so the program ends by itself.
"""

import sys

import launchpad_py as lp


def tick() -> None:
    count = 0
    while not lp.wait_for_stop(0.2):
        print(f'tick {count}', flush=True)
        count += 1


def short() -> None:
    print('done', flush=True)


if __name__ == '__main__':
    kind = sys.argv[1]
    program = lp.Program(kind)
    program.add_node(lp.PyNode(tick if kind == 'ticker' else short), label='worker')
    lp.launch(program).wait()
