"""Deprecated: ``launchpad_py.launchers.remote_node`` is now
``launchpad_py.node_side.remote_node_main`` (this name goes in the next release)."""

from launchpad_py import _moved

_moved.forward(__name__, 'launchpad_py.launchers.remote_node',
               'launchpad_py.node_side.remote_node_main')
