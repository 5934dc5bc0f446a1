"""Big groups seen as one: counts by state, members a page at a time.

A program of 1,000 workers in one group would give the dashboard 1,000 cards
and a Prometheus scrape 14,000 series, none of which anyone reads one by one.
Groups larger than a bound are summarized instead (how many nodes are in
each state, the first failed ones by name), and their members are served on
demand, ``limit`` at a time. Small groups keep their per-node view.

    big = collapsed(nodes, over=COLLAPSE_OVER)
    summaries(nodes, big)['worker'] == {'size': 1000, 'states': {'running': 998,
                                        'failed': 2}, 'failed': ['worker/17', 'worker/803']}
"""

from __future__ import annotations

import collections
from typing import Iterable

from launchpad_py.observability.statistics import NodeStatistics
from launchpad_py.node_state import NodeState

#: The dashboard shows a group of more members than this as counts, members on demand.
COLLAPSE_OVER = 20
#: /metrics keeps per-node series for groups up to this size, one set per group above.
SERIES_PER_NODE_MAX = 100
#: Failed members named in a group's summary; the rest are in its pages.
FAILED_NAMED = 10


def collapsed(nodes: Iterable[NodeStatistics], over: int) -> set[str]:
    """The labels of the groups with more than ``over`` nodes."""
    sizes = collections.Counter(node.label for node in nodes)
    return {label for label, size in sizes.items() if size > over}


def summaries(nodes: Iterable[NodeStatistics], labels: set[str]) -> dict[str, dict]:
    """For each group in ``labels``: its size, its nodes counted by state, the first failed."""
    found: dict[str, dict] = {}
    for node in nodes:
        if node.label not in labels:
            continue
        group = found.setdefault(node.label, {'size': 0, 'states': {}, 'failed': []})
        group['size'] += 1
        group['states'][node.state.value] = group['states'].get(node.state.value, 0) + 1
        if node.state == NodeState.FAILED and len(group['failed']) < FAILED_NAMED:
            group['failed'].append(node.name)
    return found


def members(nodes: Iterable[NodeStatistics], label: str, offset: int,
            limit: int) -> tuple[int, list[NodeStatistics]]:
    """The group's size, and its members from ``offset`` (by index), at most ``limit``."""
    group = sorted((node for node in nodes if node.label == label), key=lambda n: n.index)
    return len(group), group[offset:offset + limit]
