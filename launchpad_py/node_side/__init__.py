"""The node side: what runs inside a node process (and in the launching process for threads).

Holds the node's context and stop scope (``runtime``, ``program_stop``: ``lp.stop()``
and friends), running one executable in a process (``node_process``), its log lines
and counters (``reporting/``), the launcher's flags and GPUs as the
node sees them (``flag_transfer``, ``devices``), the control channel it shares with its
launcher (``control_channel``), and the entry points a launcher starts:
``local_node_main`` (a local process), ``remote_node_main`` (a process on another host),
``fork_server`` (forks local nodes from a warm interpreter) and ``host_agent`` (one per host
and program: forks that host's remote nodes, from shipped code in the host's
``code_cache`` when the launcher sends it).

May import: ``courier``, ``program``, and the package root's ``errors`` and ``flags``.
Never a launcher, supervision or observability: a node process must start without them.
"""
