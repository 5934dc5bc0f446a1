"""``Program``: the graph of nodes, grouped by label.

    p = lp.Program('agent')
    with p.group('actor'):
        for _ in range(4):
            p.add_node(lp.CourierNode(Actor, learner))

An elastic group (``p.group('actor', elastic=True)``) can grow and shrink
while the program runs (``controller.add_nodes('actor', 2)``); a group
handle (``p.group_handle('evaluator')``) lets nodes find a group's live
members at any moment.
"""

from __future__ import annotations

import contextlib
import secrets
from typing import Any, Iterator, Mapping

from launchpad_py import errors
from launchpad_py.program import graph
from launchpad_py.program.group_handle import GroupHandle
from launchpad_py.program.handle import Handle
from launchpad_py.program.node import Node


def _check_label(label, subject: str) -> str:
    if not isinstance(label, str) or not label:
        raise errors.ProgramError(
            f'label must be a non-empty string (got {label!r} for {subject}); '
            "pass a name such as label='learner'")
    return label


class Program:
    """A distributed program: nodes, their groups, and the edges between them."""

    def __init__(self, name: str):
        self.name = _check_label(name, 'Program')
        self._groups: dict[str, list[Node]] = {}
        self._current_group: str | None = None
        self._elastic: set[str] = set()
        self._group_handles: dict[str, GroupHandle] = {}
        self._uid = secrets.token_hex(8)  # Tells this program's groups from another's.

    @property
    def groups(self) -> dict[str, list[Node]]:
        """Label → nodes, in the order they were added."""
        return self._groups

    def get_all_nodes(self) -> list[Node]:
        return [node for nodes in self._groups.values() for node in nodes]

    @property
    def elastic_groups(self) -> set[str]:
        """Labels of the groups declared with ``group(label, elastic=True)``."""
        return set(self._elastic)

    @property
    def group_handles(self) -> dict[str, GroupHandle]:
        """Label → the group handle made by ``group_handle``, for the launchers."""
        return dict(self._group_handles)

    @contextlib.contextmanager
    def group(self, label: str, elastic: bool = False) -> Iterator[None]:
        """Nodes added inside the block get ``label``; re-entering a label adds to it.

        ``elastic=True``: nodes may be added to and removed from the group while
        the program runs; new ones are copies of the group's first node.
        """
        _check_label(label, f'a group of program {self.name!r}')
        if not isinstance(elastic, bool):
            raise errors.ProgramError(f'elastic must be True or False (got {elastic!r} for '
                                      f'group {label!r} of program {self.name!r})')
        if self._current_group is not None:
            raise errors.ProgramError(
                f'group {label!r} opened inside group {self._current_group!r} of program '
                f'{self.name!r}: groups cannot nest; close the outer "with p.group(...)" first')
        self._current_group = label
        if elastic:
            self._elastic.add(label)
        try:
            yield
        finally:
            self._current_group = None

    def add_node(self, node: Node, label: str | None = None) -> Handle:
        """Adds ``node`` and returns its handle.

        The node's label is ``label``, or the enclosing group's; one of the two
        is required (as in the original Launchpad).
        """
        if not isinstance(node, Node):
            raise errors.ProgramError(
                f'add_node expects a node such as lp.CourierNode(...) (got {node!r} '
                f'in program {self.name!r})')
        if node.label is not None:
            raise errors.ProgramError(f'{node.description} was already added to a program')
        if self._current_group is not None:
            if label is not None and label != self._current_group:
                raise errors.ProgramError(
                    f'label {label!r} given to {node.description} inside group '
                    f'{self._current_group!r}: leave the label out or make it match')
            label = self._current_group
        elif label is None:
            raise errors.ProgramError(
                f'{node.description} added to program {self.name!r} without a label: pass one, '
                f"as in add_node(node, label='learner'), or add it inside a "
                f"'with program.group(...)' block")
        _check_label(label, node.description)
        nodes = self._groups.setdefault(label, [])
        node._on_added(label, len(nodes))
        nodes.append(node)
        return node.create_handle()

    def group_handle(self, label: str) -> GroupHandle:
        """A handle on group ``label`` that resolves to its live members, inside a node.

            evaluators = p.group_handle('evaluator')
            p.add_node(lp.PyClassNode(Evolver, evaluators), label='evolver')
            # in Evolver: for client in evaluators.clients(): ...

        Take it before the launch: the launcher keeps it up to date as members
        start, fail, restart, join or leave.
        """
        if label not in self._groups:
            raise errors.ProgramError(
                f'program {self.name!r} has no group {label!r} to take a handle on; its groups '
                f'are {sorted(self._groups)} (add the nodes first)')
        if label not in self._group_handles:
            self._group_handles[label] = GroupHandle(label, f'{self.name}/{label}/{self._uid}')
        return self._group_handles[label]

    def to_dot(self, resources: Mapping[str, Any] | None = None) -> str:
        """The graph in Graphviz DOT: groups as clusters, an edge per handle passed to a node.

        ``resources`` (as given to ``lp.launch``) are written on each node of their group.
        Render with ``dot -Tsvg``, or use ``python -m launchpad_py.cli.draw``.
        """
        return graph.to_dot(self, resources)

    def __repr__(self) -> str:
        sizes = ', '.join(f'{label}×{len(nodes)}' for label, nodes in self._groups.items())
        return f'Program({self.name!r}: {sizes})'
