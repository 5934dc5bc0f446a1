"""Writes a user's project (a launching script and its own module) for tests/test_share_nothing.py.

The script launches an adder from the project's module ``mymod`` on one share-nothing host
and a client on another, then prints one JSON line: the client's answer, where it ran, and
what the launcher shipped (``code_pack.statistics()``).
"""

from __future__ import annotations

MODULE = '''
TOKEN = {token!r}


class Adder:
    def add(self, a, b):
        return a + b + 1000
'''

SCRIPT = '''
import json, sys
import launchpad_py as lp
from launchpad_py.launchers.remote import code_pack
import mymod


def client(adder):
    import os, socket, mymod
    print('RESULT ' + json.dumps([adder.add(1, 2), mymod.TOKEN, os.getcwd(),
                                  socket.gethostname()]), flush=True)
    lp.stop()


program = lp.Program('shipped')
adder = program.add_node(lp.CourierNode(mymod.Adder), label='adder')
program.add_node(lp.PyNode(client, adder), label='client')
options = ['-F', {config!r}]
host = lambda name: lp.SshHost(name, ssh_options=options, python={python!r}, ship_code=True)
controller = lp.launch(program, launch_type='ssh', terminal='output_to_files',
                       resources={{'adder': host('p1'), 'client': host('p2')}})
controller.wait(timeout=120)
print(json.dumps({{'hosts': sorted(s.host for s in controller.statuses()),
                  'shipped': code_pack.statistics(),
                  'tail': controller.output_tail('client/0')}}), flush=True)
'''


def probe_value() -> None:
    """A node printing the value of ``lp_probe_pkg``, a package only provisioning installs."""
    import lp_probe_pkg
    print(f'PROBE {lp_probe_pkg.VALUE}', flush=True)


def write(directory, token: str, config: str, python: str) -> None:
    (directory / 'mymod.py').write_text(MODULE.format(token=token))
    (directory / 'main.py').write_text(SCRIPT.format(config=config, python=python))
