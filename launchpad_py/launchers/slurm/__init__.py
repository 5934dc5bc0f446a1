"""The ``slurm`` backend: ``launch`` (one allocation, one job step per node, on top of
``launchers.remote``), ``allocation`` and ``_hold`` (salloc, held for the launcher's
lifetime), ``job`` (srun steps and Slurm's states), ``resources`` (``SlurmResources``,
``SlurmOptions``).

May import: everything below ``launchers``, ``launchers.options`` and ``launchers.remote``.
"""
