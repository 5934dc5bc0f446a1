"""Supervision: the running program as the launching process sees it, for every launcher.

``controller.ProgramController`` is what ``lp.launch`` returns: the public handle on
``supervisor.Supervisor``, the one thread that changes a program's state. The supervisor
holds the parts as objects with small interfaces, none calling another:
``failure_handling`` (stop the program or restart the node), ``shutdown`` (the grace
period, kills; ``stuck_threads`` for what cannot be killed), ``elastic`` and
``membership`` (groups that grow and shrink, group handles); the controller holds
``observe`` (statistics, status endpoint, dashboard). ``worker`` is the interface every
launcher implements to run one node (``Worker``, ``Events``, ``NodeState``);
``interruptible`` lets the main thread wait without missing Ctrl-C. Beside
them, what launchers share before and after the start is ``launch_kit/`` (pickles,
the program secret, the address book, run directories, node output, metrics probes).

May import: ``courier``, ``program``, ``node_side``, ``observability`` and the package
root's ``errors`` and ``flags``. Never ``launchers``: backends build on this, not the
other way round.
"""
