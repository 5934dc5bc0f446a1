"""The program as a picture: its nodes, groups and the handles passed between them.

``structure(program)`` lists nodes and edges (an edge for every handle that a
node receives among its arguments, from that node to the node it can call);
``to_dot`` writes it in Graphviz's DOT language, one cluster per group::

    print(program.to_dot())                      # or: python -m launchpad_py.cli.draw script.py
    dot -Tsvg -o program.svg <<< "$(...)"
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from launchpad_py import errors
from launchpad_py.program.address import Address
from launchpad_py.program.group_handle import GroupHandle
from launchpad_py.program.handle import Dereferenceable, find_handles


@dataclasses.dataclass(frozen=True)
class GraphNode:
    label: str
    index: int
    kind: str  # 'CourierNode(Learner)'

    @property
    def name(self) -> str:
        return f'{self.label}/{self.index}'


@dataclasses.dataclass(frozen=True)
class GraphEdge:
    source: str  # The node that receives the handle, and so calls ('label/index').
    target: str  # The node the handle points to.
    argument: str  # The argument that holds the handle.


@dataclasses.dataclass(frozen=True)
class ProgramGraph:
    name: str
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    groups: dict[str, list[str]]

    @property
    def missing(self) -> list[str]:
        """Targets of edges that are no node of the program (``'not added: ...'``)."""
        return list(dict.fromkeys(e.target for e in self.edges if e.target.startswith(NOT_ADDED)))


def structure(program) -> ProgramGraph:
    """The nodes and edges of ``program`` (an ``lp.Program``).

    A handle of a node that was never added still draws its edge, to a node
    named ``'not added: CourierNode(Learner)'`` (``lp.launch`` refuses such a program).
    """
    owner: dict[int, str] = {}
    nodes, groups = [], {}
    for label, members in program.groups.items():
        groups[label] = []
        for node in members:
            graph_node = GraphNode(label, node.index, f'{type(node).__name__}({node._target_name()})')
            nodes.append(graph_node)
            groups[label].append(graph_node.name)
            for address in node.addresses:
                owner[id(address)] = graph_node.name
    edges: dict[GraphEdge, None] = {}  # In order, each once: a list's `in` made this O(E^2).
    for label, members in program.groups.items():
        for node in members:
            source = f'{label}/{node.index}'
            for argument, value in node.arguments():
                for handle in find_handles(value):
                    # A group handle reaches every member of its group.
                    targets = (groups[handle.label] if isinstance(handle, GroupHandle)
                               else _pointed_nodes(handle, owner))
                    for target in targets:
                        edges.setdefault(GraphEdge(source, target, argument))
    return ProgramGraph(program.name, nodes, list(edges), groups)


def _pointed_nodes(handle, owner: dict[int, str]) -> list[str]:
    """The nodes whose addresses ``handle`` holds, found among its attributes."""
    found: list[str] = []
    for address in _addresses_in(handle, depth=0):
        name = owner.get(id(address), f'{NOT_ADDED}{address.owner}')
        if name not in found:
            found.append(name)
    return found


#: How ``structure`` names a node that a handle points to but the program does not hold.
NOT_ADDED = 'not added: '


def check_complete(program) -> None:
    """Raises ``ProgramError`` when a node holds a handle of a node the program does not hold.

    Such a handle would only fail inside the running node; this names both nodes now.
    """
    for edge in structure(program).edges:
        if edge.target.startswith(NOT_ADDED):
            missing = edge.target[len(NOT_ADDED):]
            raise errors.ProgramError(
                f'node {edge.source!r} of program {program.name!r} holds a handle of '
                f'{missing} (argument {edge.argument!r}), which was never added to the program: '
                f'add it with program.add_node(...) before lp.launch')


def _addresses_in(obj: Any, depth: int) -> list[Address]:
    if isinstance(obj, Address):
        return [obj]
    if depth > 4:
        return []
    if isinstance(obj, dict):
        items = list(obj.values())
    elif isinstance(obj, (list, tuple, set, frozenset)):
        items = list(obj)
    elif isinstance(obj, Dereferenceable):
        items = list(vars(obj).values()) if hasattr(obj, '__dict__') else list(obj.arguments())
    else:
        return []
    return [a for item in items for a in _addresses_in(item, depth + 1)]


def _quote(text: str) -> str:
    return '"' + text.replace('\\', '\\\\').replace('"', '\\"').replace('\n', '\\n') + '"'


def to_dot(program, resources: Mapping[str, Any] | None = None) -> str:
    """DOT text of ``program``: groups as clusters, node type (and group resources) on each node."""
    graph = structure(program)
    resources = resources or {}
    lines = [f'digraph {_quote(graph.name)} {{',
             f'  label={_quote("program " + graph.name)}; labelloc=t; fontname="Helvetica";',
             '  rankdir=LR; compound=true;',
             '  node [shape=box, style="rounded,filled", fillcolor="#eef3fb", '
             'fontname="Helvetica", fontsize=11];',
             '  edge [fontname="Helvetica", fontsize=9, color="#555555"];']
    kinds = {n.name: n.kind for n in graph.nodes}
    for number, (label, members) in enumerate(graph.groups.items()):
        title = f'{label} ×{len(members)}' if len(members) > 1 else label
        lines.append(f'  subgraph "cluster_{number}" {{')
        lines.append(f'    label={_quote(title)}; style="rounded,dashed"; color="#8899aa";')
        spec = resources.get(label)
        for name in members:
            text = f'{name}\n{kinds[name]}' + (f'\n{_short(spec)}' if spec is not None else '')
            lines.append(f'    {_quote(name)} [label={_quote(text)}];')
        lines.append('  }')
    for name in graph.missing:
        lines.append(f'  {_quote(name)} [style="rounded,dashed", color="#cc0000", '
                     f'fillcolor="#fff0f0"];')
    for edge in graph.edges:
        lines.append(f'  {_quote(edge.source)} -> {_quote(edge.target)} '
                     f'[label={_quote(edge.argument)}];')
    lines.append('}')
    return '\n'.join(lines) + '\n'


def _short(spec: Any, limit: int = 48) -> str:
    """A resource spec in a few lines: a dataclass's fields that differ from their defaults."""
    if not dataclasses.is_dataclass(spec):
        return _clip(repr(spec), limit)
    lines = [type(spec).__name__]
    for field in dataclasses.fields(spec):
        value = getattr(spec, field.name)
        if field.default is not dataclasses.MISSING and value == field.default:
            continue
        if field.default_factory is not dataclasses.MISSING and value == field.default_factory():
            continue
        if isinstance(value, dict):
            lines.extend(_clip(f'{field.name}: {k}={v!r}', limit) for k, v in value.items())
        else:
            lines.append(_clip(f'{field.name}={value!r}', limit))
    return '\n'.join(lines)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + '…'
