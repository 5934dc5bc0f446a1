"""Supervision: the running program as the launching process sees it, for every launcher.

``controller.ProgramController`` is what ``lp.launch`` returns: the public handle on
``supervisor.Supervisor``, the one thread that changes a program's state. The supervisor
holds the parts as objects with small interfaces, none calling another:
``failure_handling`` (stop the program or restart the node), ``shutdown`` (the grace
period, kills; ``stuck_threads`` for what cannot be killed), ``elastic`` and
``membership`` (groups that grow and shrink, group handles); the controller holds
``observe`` (statistics, status endpoint, dashboard). ``worker`` is the interface every
launcher implements to run one node (``Worker``, ``Events``, ``NodeState``). Beside
them, what launchers share before and after the start: ``shipping`` (pickles),
``address_book`` (late binding: the addresses local nodes report and ask for), ``rundir`` (a launch's private directory), ``program_secret``, ``output``
(where node output goes), ``metrics_probe`` and ``interruptible``.

May import: ``courier``, ``program``, ``node_side``, ``observability`` and the package
root's ``errors`` and ``flags``. Never ``launchers``: backends build on this, not the
other way round.
"""
