"""The ``slurm`` backend: ``launch`` (one allocation, one job step per node, on top of
``launchers.remote``), ``host_steps`` (or one step per host, running the host agent),
``allocation`` and ``_hold`` (salloc, held for the launcher's
lifetime), ``job`` (srun steps and Slurm's states), ``resources`` (``SlurmResources``,
``SlurmOptions``), ``growth`` (elastic groups: the room the job holds for added steps),
``checkpoint_cleanup`` (the launch's private checkpoint directories leave the hosts).

May import: everything below ``launchers``, ``launchers.options`` and ``launchers.remote``.
"""
