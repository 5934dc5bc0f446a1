"""``python -m launchpad_py.compat [-m MODULE | SCRIPT] [ARGS...]``: run Launchpad code unchanged."""

from __future__ import annotations

import os
import runpy
import sys

from launchpad_py import compat

USAGE = 'usage: python -m launchpad_py.compat [-m MODULE | SCRIPT] [ARGS...]'


def main(argv: list[str]) -> None:
    if not argv or argv[0] in ('-h', '--help') or (argv[0] == '-m' and len(argv) < 2):
        sys.exit(USAGE)
    compat.install()
    if argv[0] == '-m':
        sys.argv = [argv[1]] + argv[2:]
        runpy.run_module(argv[1], run_name='__main__', alter_sys=True)
    else:
        sys.argv = list(argv)
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
        runpy.run_path(argv[0], run_name='__main__')


if __name__ == '__main__':
    main(sys.argv[1:])
