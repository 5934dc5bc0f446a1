"""Launching scripts that tests/test_submit.py submits (run as ``python submit_scripts.py KIND``).

``ticker``: one node printing ``tick N`` every 0.2 s until the program is stopped
(``lp.wait_for_stop``), in a program named ``ticker``; ``short``: a node that
prints ``done`` and returns, so the program ends by itself; ``resumer``: a ticker that
keeps its count in its checkpoint directory and says where it resumed from;
``param_server``: the parameter-server example's server and writer (no requesters,
whose reads would spin for as long as the job runs), the server saving every 100
updates (about once a second).
"""

import os
import sys

import launchpad_py as lp


def tick() -> None:
    count = 0
    while not lp.wait_for_stop(0.2):
        print(f'tick {count}', flush=True)
        count += 1


def resume() -> None:
    path = os.path.join(lp.checkpoint_dir(), 'count')
    count = int(open(path).read()) if os.path.exists(path) else 0
    print(f'resumed from {count}', flush=True)
    while not lp.wait_for_stop(0.2):
        count += 1
        with open(path + '.tmp', 'w') as f:
            f.write(str(count))
        os.replace(path + '.tmp', path)
        print(f'tick {count}', flush=True)


def short() -> None:
    print('done', flush=True)


def param_server_program() -> lp.Program:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from examples.parameter_server.program import add_servers
    program = lp.Program('param_server')
    add_servers(program, 1, 1000, checkpoint_every=100)
    return program


if __name__ == '__main__':
    kind = sys.argv[1]
    if kind == 'param_server':
        program = param_server_program()
    else:
        program = lp.Program(kind)
        body = {'ticker': tick, 'short': short, 'resumer': resume}[kind]
        program.add_node(lp.PyNode(body), label='worker')
    lp.launch(program).wait()
