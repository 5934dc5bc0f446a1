"""What every multi-host backend shares: nodes that dial back, report their addresses,
get the address table and their executable, stream logs and end with the launcher.

``launch`` (the sequence), ``setup`` (what one launch's workers share), ``worker``
(``RemoteWorker``, and ``Starter``/``Placement``: how a backend says where and how a
node process starts), ``host_agents`` (``HostAgent``: one session per host whose agent forks
that host's nodes, and ``AgentStarter``, a node it starts), ``code_pack`` (the user's code
packed for hosts that share nothing, sent by a host's agent session only when its cache
lacks it), ``seen_secret`` (the program's secret as a starter saw it go by, for the
cleanup after the end). A backend (``ssh``, ``slurm``,
``kubernetes``) supplies placements.

May import: everything below ``launchers`` and ``launchers.options``; not a backend.
"""
