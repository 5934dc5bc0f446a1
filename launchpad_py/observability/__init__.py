"""Observability: looking at a running program without touching its nodes' code.

``statistics`` (per-node counters and their history), ``prometheus`` (the same as
metrics text), ``dashboard`` and ``dashboard_page`` (the web page), ``status_endpoint``
(the handle file and socket ``python -m launchpad_py.cli.status`` reads). Each reads
what the controller hands it (its workers, its name); the controller holds them
through ``supervision/observe.py``.

May import: ``courier``, ``program``, ``node_side`` and the package root
(``errors``, ``flags``, ``node_state``). Never ``supervision`` or ``launchers``: the
controller uses this folder, so an import back would be a cycle.
"""
