"""Run programs written for DeepMind's Launchpad without editing them.

Opt-in only. Either run the script through the compatibility runner::

    python -m launchpad_py.compat my_agent.py --lp_launch_type=local_mp
    python -m launchpad_py.compat -m my_package.launch --num_actors=4

or call ``launchpad_py.compat.install()`` before the first ``import launchpad``.
Both make ``import launchpad`` resolve to ``launchpad_py`` and ``import courier``
to an original-style courier module, in this process and in every node
process it starts. Nothing changes for code that does not opt in, so an
environment with the original installed keeps working.

The top floor: may import anything in the package; nothing imports it.
"""

from __future__ import annotations

import os
import sys

from launchpad_py.node_side.node_process import PRELOAD_ENV
_ACTIVATE = 'launchpad_py.compat.activate'


def install() -> None:
    """Aliases ``launchpad`` and ``courier`` here and in node processes started later."""
    import launchpad_py
    from launchpad_py.compat import courier as compat_courier
    sys.modules['launchpad'] = launchpad_py
    sys.modules['courier'] = compat_courier
    modules = [m for m in os.environ.get(PRELOAD_ENV, '').split(',') if m]
    if _ACTIVATE not in modules:
        os.environ[PRELOAD_ENV] = ','.join(modules + [_ACTIVATE])


def uninstall() -> None:
    """Removes the aliases (for tests and notebooks)."""
    for name in ('launchpad', 'courier'):
        module = sys.modules.get(name)
        if module is not None and getattr(module, '__name__', '').startswith('launchpad_py'):
            del sys.modules[name]
    modules = [m for m in os.environ.get(PRELOAD_ENV, '').split(',') if m and m != _ACTIVATE]
    if modules:
        os.environ[PRELOAD_ENV] = ','.join(modules)
    else:
        os.environ.pop(PRELOAD_ENV, None)
