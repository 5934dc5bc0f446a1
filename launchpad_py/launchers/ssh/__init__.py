"""The ``ssh`` backend: ``launch`` (one ssh session per host running its agent, on top of
``launchers.remote``)
and ``host`` (its resources type ``SshHost``, the ssh command line, the checks of each host's
python, launchpad_py and requirements), ``provision`` (``SshHost(provision=True)``: the
requirements installed on a host into a venv of their own).

May import: everything below ``launchers``, ``launchers.options`` and ``launchers.remote``.
"""
