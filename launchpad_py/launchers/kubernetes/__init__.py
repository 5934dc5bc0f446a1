"""The ``kubernetes`` backend: ``launch`` (pods on top of ``launchers.remote``), ``pods``
(the ``Starter`` of one pod), ``manifests`` (what is applied), ``api`` (the cluster, through
the official client), ``resources`` (``KubernetesResources``, ``KubernetesOptions``).

May import: everything below ``launchers``, ``launchers.options`` and ``launchers.remote``.
"""
