"""What a launch holds around its workers, shared by every launcher that starts them.

Made before the first worker starts and handed to them, these are not parts of the
controller: ``shipping`` (the executables' pickles), ``program_secret`` (the launch's
secret, registered per address), ``address_book`` (late binding: the addresses local nodes
report and ask for), ``rundir`` (a launch's private directory), ``output`` (where node output
goes) and ``metrics_probe`` (a node's counters, asked over its control channel).

May import: ``courier``, ``program`` and the package root's ``errors``. Never the rest of
``supervision`` (the controller's side uses these, not the other way round), nor
``launchers``.
"""
