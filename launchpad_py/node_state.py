"""The states of a running program's nodes, as every launcher reports them (``lp.NodeState``).

At the package root because both the controller (``supervision``) and what reads its
state (``observability``) speak them, and neither may import the other's side.
"""

from __future__ import annotations

import dataclasses
import enum


class NodeState(str, enum.Enum):
    STARTING = 'starting'
    RUNNING = 'running'
    RESTARTING = 'restarting'  # failed; waits out its backoff before it starts again
    FINISHED = 'finished'   # returned normally
    STOPPED = 'stopped'     # ended after a stop request
    FAILED = 'failed'       # raised, or crashed
    KILLED = 'killed'       # did not end within the grace period
    #: Removed from its elastic group, it ignored its stop past the grace period and could not
    #: be killed (a ``local_mt`` thread): no longer supervised, it may still run. Not "stopped",
    #: which would hide a thread that still uses CPU and may still serve.
    LEFT_RUNNING = 'left_running'


#: The states a node does not leave.
ENDED = (NodeState.FINISHED, NodeState.STOPPED, NodeState.FAILED, NodeState.KILLED,
         NodeState.LEFT_RUNNING)


@dataclasses.dataclass
class NodeStatus:
    """A snapshot of one node of a running program."""

    label: str
    index: int
    state: NodeState
    pid: int | None
    exit_code: int | None
    restarts: int = 0
    host: str = 'localhost'
    #: The restarts by why: ``'failed'`` (counted against ``max_restarts``), or what the
    #: platform did (``FailureReport.lost_by``: ``'evicted'``, ``'host_lost'``... not counted).
    restart_reasons: dict[str, int] = dataclasses.field(default_factory=dict)
