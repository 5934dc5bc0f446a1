"""Which frame loop the socket paths run: the compiled one (``_cframes``) or pure Python.

``_frames.c``, built by ``pip install`` where a C compiler is at hand, receives and
sends the common small frame (no buffers, nothing released, no shared memory) with
the GIL released around its system calls; ``frames.Reader`` and the connections
fall back to their own Python code for every other frame, for TLS, and when the
module is absent. ``LP_COURIER_PURE=1`` asks for the pure-Python loop even where
the compiled one is built (CI runs the courier tests both ways). The choice is made
per connection, when it opens, so one process may hold both kinds::

    frame_loop.active()   # 'compiled' or 'pure', for connections opened now
"""

from __future__ import annotations

import importlib
import os
import warnings
from types import ModuleType

PURE_ENV = 'LP_COURIER_PURE'
#: The ``API_VERSION`` of ``_frames.c`` this Python speaks (its functions' arguments and results).
API_VERSION = 4

try:  # By name: an extension module is no source file the import-linter contracts can place.
    _cframes = importlib.import_module('launchpad_py.courier._cframes')
except ImportError:  # Not built here (no compiler at install time): the pure loop runs.
    _cframes = None
if _cframes is not None and getattr(_cframes, 'API_VERSION', 1) != API_VERSION:
    # A build of older sources would unpack wrongly on the first read: run pure instead.
    warnings.warn(f'{_cframes.__file__} was built from other sources (API '
                  f'{getattr(_cframes, "API_VERSION", 1)}, this code needs {API_VERSION}); the '
                  'pure-Python frame loop runs. Rebuild: python setup.py build_ext --inplace '
                  '(or pip install -e .)', RuntimeWarning)
    _cframes = None


def compiled() -> ModuleType | None:
    """The compiled loop for a connection opened now, or None for the pure-Python one."""
    if os.environ.get(PURE_ENV, '') not in ('', '0'):
        return None
    return _cframes


def active() -> str:
    """``'compiled'`` or ``'pure'``: the loop a connection opened now would run."""
    return 'pure' if compiled() is None else 'compiled'
