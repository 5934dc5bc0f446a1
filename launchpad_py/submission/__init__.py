"""Submission: programs whose controller runs where the program does, outliving the terminal.

``submit`` (``lp.submit``) records the program for the user (``records``: a
private directory, 0600 files, the program's secret) and starts its controller
on the platform (``platforms/``: an sbatch job, a detached ssh session on a
host, or the pod of a Kubernetes Job), where ``controller_main`` runs the script and opens ``endpoint``.
``submitted`` (``lp.attach``) finds it again from any process: state, node
table, ``logs`` (each line timed by ``stamps``), stop, and the dashboard
through ``forward`` (an ssh port forward); ``client`` is how it talks to the
endpoint.

May import: launchers, supervision, node_side, program and below; the CLI
(``cli/programs.py``) is the only folder above it.
"""
