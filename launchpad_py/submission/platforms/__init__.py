"""Where a submitted program's controller is started, one module per platform.

``slurm`` (an sbatch job whose batch step is the controller), ``ssh`` (a detached session
on a named host) and ``kubernetes`` (the pod of a Job, whose objects ``kubernetes_objects``
renders). Each says ``submit``, ``state`` and how to cancel; ``submission.submitted`` picks
one by the record's launcher.

May import: ``submission.records``, the launchers' resources and APIs they submit
through, and below. Never ``submit``, ``submitted`` or the controller's process.
"""
