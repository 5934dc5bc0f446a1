"""The controller's side of group handles: which members are live, told to every node.

For each group that has a handle (``Program.group_handle``) the controller
keeps the names and handles of its live members (ready, not failed, not
being restarted or removed). When they change it publishes a new table in
the launching process and sends it to every node (``Worker.send_members``);
see ``program/group_handle.py`` for the node's side.
"""

from __future__ import annotations

from launchpad_py.courier import serialization
from launchpad_py.supervision.worker import NodeState, Worker
from launchpad_py.program import Handle, Program, group_handle


class Membership:
    """Live members per group handle, and the table sent to nodes."""

    def __init__(self, program: Program):
        self._tokens = {label: handle.token for label, handle in program.group_handles.items()}
        self._handles: dict[tuple[str, int], Handle] = {
            (label, node.index): node.create_handle()
            for label in self._tokens for node in program.groups[label]}
        self._pickled: dict[tuple[str, int], bytes] = {}
        self._names: dict[str, list[str]] = {}
        #: The newest table: token -> (version, [(name, pickled member handle), ...]).
        self.table: group_handle.Table = {}

    def add_member(self, label: str, index: int, handle: Handle) -> None:
        """A node added to a running group; its handle is how nodes will reach it."""
        if label in self._tokens:
            self._handles[label, index] = handle

    def update(self, workers: list[Worker]) -> group_handle.Table | None:
        """Recomputes the live members; the new table if it changed, else None."""
        changed = False
        for label, token in self._tokens.items():
            live = sorted((w for w in workers if w.label == label and not w.retired
                           and w.state == NodeState.RUNNING and not w.removing),
                          key=lambda w: w.index)
            names = [w.name for w in live]
            if token in self.table and self._names[token] == names:
                continue
            version = self.table[token][0] + 1 if token in self.table else 1
            self._names[token] = names
            self.table[token] = (version, [(w.name, self._member(label, w.index)) for w in live])
            changed = True
        return dict(self.table) if changed else None

    def _member(self, label: str, index: int) -> bytes:
        """The member's handle, pickled once it is live (its address is bound by then)."""
        key = (label, index)
        if key not in self._pickled:
            self._pickled[key] = serialization.dumps(self._handles[key])
        return self._pickled[key]
