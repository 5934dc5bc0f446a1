"""Builds the courier's compiled frame loop; everything else is in pyproject.toml.

The extension needs only a C compiler and Python's headers. It is optional: where it
cannot be built, the install goes on and the courier runs its pure-Python frame loop
(the same one ``LP_COURIER_PURE=1`` selects).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension('launchpad_py.courier._cframes',
                             sources=['launchpad_py/courier/_frames.c',
                                      'launchpad_py/courier/_settle.c',
                                      'launchpad_py/courier/_future.c'],
                             extra_compile_args=['-O2', '-std=c11', '-Wall'],
                             optional=True)])
