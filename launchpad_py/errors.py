"""The library's exception tree. Each refines the builtin it is a kind of.

Messages name the subject and the offending value, and say how to fix it.
RPC transport errors live in ``courier.errors``.
"""


class LaunchpadError(Exception):
    """Base of every error raised by launchpad_py itself."""


class ProgramError(LaunchpadError, ValueError):
    """The program graph or a launch argument is malformed."""


class NodeSerializationError(ProgramError, TypeError):
    """A node, or one of its arguments, cannot be shipped to its executor."""


class UnknownLaunchTypeError(ProgramError):
    """No launcher is registered under the requested name."""


class ResourcesError(ProgramError):
    """Resources name an unknown group, or a launcher cannot apply them."""


class NotRunningError(LaunchpadError, RuntimeError):
    """Something that only exists in a running program was used outside one."""


class LaunchError(LaunchpadError, RuntimeError):
    """A node failed to start; the message names it and shows its output tail."""


class PeerFailedError(LaunchpadError, RuntimeError):
    """A call reached a node whose own object had failed: that node's failure is the cause."""


class NodeFailedError(LaunchpadError, RuntimeError):
    """A node raised while the program ran.

    ``label`` and ``index`` name the node; ``remote_traceback`` is the
    traceback text from where it failed; ``__cause__`` is the original
    exception where it could be rebuilt. When the node failed because a node
    it called raised, ``raised_in`` says where (``"method 'step' of node
    'worker/1'"``) and the message names that node first, the caller second.
    """

    def __init__(self, label: str, index: int, remote_traceback: str, summary: str,
                 raised_in: str | None = None):
        caller = f'node {label!r} (index {index})'
        where = (f'{raised_in} raised, called by {caller}' if raised_in
                 else f'{caller} failed')
        super().__init__(f'{where}: {summary}\n{remote_traceback}')
        self.label = label
        self.index = index
        self.remote_traceback = remote_traceback
        self.raised_in = raised_in


class StuckNodesError(LaunchpadError, RuntimeError):
    """Nodes running as threads (``test_mt``) ignored a stop for the grace period.

    ``nodes`` names them; the message shows each one's Python stack. Their
    threads are left running: threads cannot be killed.
    """

    def __init__(self, nodes: list[str], message: str):
        super().__init__(message)
        self.nodes = nodes
