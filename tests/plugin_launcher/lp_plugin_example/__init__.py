"""A third-party launcher, as its own distribution: ``launch_type='local_remote'``.

Every node is a local process started the way remote backends start theirs (it dials
back, reports its address, gets the table), without ssh: the whole backend is one
placement function and one ``Backend`` value, found through the entry point in
``lp_plugin_example-0.1.dist-info/entry_points.txt`` (tests/test_plugin_launcher.py).
"""

import sys

from launchpad_py.launchers.registry import Backend, Capabilities
from launchpad_py.launchers.remote import launch as remote

_NODE = [sys.executable, '-m', 'launchpad_py.node_side.remote_node_main']


def _place(label: str, index: int) -> remote.Placement:
    del label, index  # Every node runs here.
    env = [f'{name}={value}' for name, value in remote.node_environment().items()]
    return remote.Placement(argv=['env', *env, *_NODE], host='localhost', launcher_ip='127.0.0.1')


def launch_local_remote(program, options):
    placements = {(label, node.index): _place(label, node.index)
                  for label, nodes in program.groups.items() for node in nodes}
    return remote.launch(program, options, 'local_remote', placements, place_new=_place)


BACKEND = Backend('local_remote', launch_local_remote,
                  capabilities=Capabilities(elastic_groups=True, terminal=True))
