"""The ``ray`` backend: ``launch`` (every node in a Ray actor, on top of ``launchers.remote``),
``starter`` (``RayStarter``: one node's actor, as the remote core starts it), ``node_host``
(the actor itself, run inside Ray's workers), ``cluster`` (connecting, actor options, the
gang placement group), ``resources`` (``RayResources``, ``RayOptions``; no ray import),
``checkpoint_cleanup`` (the launch's private checkpoint directories leave the Ray hosts).

Ray places and supervises the processes; courier carries every call between nodes.

May import: everything below ``launchers``, ``launchers.options`` and ``launchers.remote``.
"""
