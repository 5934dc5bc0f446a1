"""Importing this module installs the compatibility aliases (used by node processes)."""

from launchpad_py.compat import install

install()
