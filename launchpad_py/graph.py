"""Deprecated: ``launchpad_py.graph`` is now ``launchpad_py.cli.draw`` (this name goes in the next release)."""

from launchpad_py import _moved

_moved.forward(__name__, 'launchpad_py.graph', 'launchpad_py.cli.draw')
