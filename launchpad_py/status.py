"""Deprecated: ``launchpad_py.status`` is now ``launchpad_py.cli.status`` (this name goes in the next release)."""

from launchpad_py import _moved

_moved.forward(__name__, 'launchpad_py.status', 'launchpad_py.cli.status')
