"""What a node forked by the fork server writes of the server's memory (stop 44).

Every page a forked node writes is a page the kernel copies for it (copy on write); 2,000
nodes at ~6.8 MiB each were 13 GiB, and the last of them started at a third of the speed of
the first on the shared VM (docs/performance.md, "Stop 44").
"""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO


_ENVIRONMENT = """
import os
from launchpad_py.launchers.local.process_starter import env_changes
from launchpad_py.node_side import fork_server
base = dict(os.environ)
# What preload may do to the server's environment: add a name, change one.
fork_server._drift.update({'LP_ADDED': None, 'LP_CHANGED': base['LP_CHANGED']})
os.environ.update(LP_ADDED='x', LP_CHANGED='by preload')
wanted = {**base, 'LP_NEW': 'n', 'LP_CHANGED': 'by group'}
del wanted['LP_GONE']
fork_server._set_environment(*env_changes(base, wanted))
print(dict(os.environ) == {**wanted, 'GRPC_VERBOSITY': 'ERROR'}, sorted(os.environ))
"""


def test_a_forked_node_gets_exactly_the_environment_it_asked_for():
    """The server sends only what differs from its own environment; the child still ends up
    with the launcher's environment, neither more (what preload set, names the launcher
    dropped) nor less (courier's GRPC_VERBOSITY default)."""
    env = {'PATH': '/usr/bin', 'LP_CHANGED': 'launcher', 'LP_GONE': 'g', 'PYTHONPATH': str(REPO)}
    done = subprocess.run([sys.executable, '-c', _ENVIRONMENT], capture_output=True, text=True,
                          timeout=60, cwd=REPO, check=True, env=env)
    assert done.stdout.startswith('True'), done.stdout
