"""Old module paths that keep working for one release, with a DeprecationWarning.

    # launchpad_py/graph.py, the old home of launchpad_py/cli/draw.py:
    from launchpad_py import _moved
    _moved.forward(__name__, 'launchpad_py.graph', 'launchpad_py.cli.draw')

Imported, the old name is the new module; run with ``python -m``, it runs the new one.
"""

from __future__ import annotations

import importlib
import runpy
import sys
import warnings


def forward(name: str, old: str, new: str) -> None:
    """Makes module ``old`` (whose ``__name__`` is ``name``) an alias of ``new``, warning once."""
    # Run as a command, the warning is the old module's (__main__: shown by default);
    # imported, it is the importer's.
    warnings.warn(f'{old} moved to {new}; the old name will be removed in the next release',
                  DeprecationWarning, stacklevel=2 if name == '__main__' else 3)
    if name == '__main__':
        runpy.run_module(new, run_name='__main__', alter_sys=True)
    else:
        sys.modules[old] = importlib.import_module(new)
