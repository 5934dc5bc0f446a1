"""Imported before a node's code (``LAUNCHPAD_PY_PRELOAD``): keeps the node starting for a minute.

A node whose group preloads this module never reports ready in time, so tests
can act on a program that is still being launched.
"""

import threading

threading.Event().wait(60)
