"""The ``ssh`` backend: ``launch`` (placements over ssh, on top of ``launchers.remote``)
and ``host`` (its resources type ``SshHost``, the ssh command line).

May import: everything below ``launchers``, ``launchers.options`` and ``launchers.remote``.
"""
