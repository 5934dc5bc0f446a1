"""The ``ssh`` backend: ``launch`` (one ssh session per host running its agent, on top of
``launchers.remote``)
and ``host`` (its resources type ``SshHost``, the ssh command line).

May import: everything below ``launchers``, ``launchers.options`` and ``launchers.remote``.
"""
