"""Deprecated: ``launchpad_py.launchers.worker`` is now
``launchpad_py.node_side.local_node_main`` (this name goes in the next release)."""

from launchpad_py import _moved

_moved.forward(__name__, 'launchpad_py.launchers.worker',
               'launchpad_py.node_side.local_node_main')
