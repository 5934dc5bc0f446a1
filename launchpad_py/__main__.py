"""``python -m launchpad_py COMMAND``: see ``cli/programs.py`` (submit, list, status, logs, stop)."""

import sys

from launchpad_py.cli.programs import main

if __name__ == '__main__':
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
