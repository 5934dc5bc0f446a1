"""A program's statistics in the Prometheus text exposition format (version 0.0.4).

    lp_node_calls_total{program="agent",node="learner/0",method="step"} 1200

Counters end in ``_total``; latency is a summary (``quantile="0.99"``, ``_sum``,
``_count``) over each method's recent calls; state is one gauge per state
with value 1 for the node's current one.

A group of more than ``group_summary.SERIES_PER_NODE_MAX`` nodes gets group
series instead, so a scrape stays bounded however many workers run (per-node
series would be about 14 per node: 1.4 million lines at 100,000 nodes)::

    lp_group_nodes{program="agent",group="actor",state="running"} 998
    lp_group_calls_total{program="agent",group="actor",method="step"} 51200
"""

from __future__ import annotations

from launchpad_py.observability import group_summary
from launchpad_py.observability.statistics import NodeStatistics
from launchpad_py.node_state import NodeState

_NODE_METRICS = (
    # name, type, help, attribute
    ('lp_node_uptime_seconds', 'gauge', 'Seconds since the node started.', 'uptime_s'),
    ('lp_node_restarts_total', 'counter', 'Times the node was restarted.', 'restarts'),
    ('lp_node_calls_in_flight', 'gauge', 'Calls being served now.', 'in_flight'),
    ('lp_node_received_bytes_total', 'counter', 'Request bytes received.', 'bytes_in'),
    ('lp_node_sent_bytes_total', 'counter', 'Reply bytes sent.', 'bytes_out'),
    ('lp_node_resident_memory_bytes', 'gauge', "The node process's resident memory.", 'rss_bytes'),
    ('lp_node_cpu_percent', 'gauge', 'CPU use of the node process, percent of one core.',
     'cpu_percent'),
)


def _escape(value: str) -> str:
    return value.replace('\\', '\\\\').replace('\n', '\\n').replace('"', '\\"')


def _labels(**labels: str) -> str:
    return '{' + ','.join(f'{k}="{_escape(str(v))}"' for k, v in labels.items()) + '}'


_BY_REASON_HELP = ('Restarts by why: failed (counted against max_restarts), or what the platform '
                   'did (evicted, deleted, preempted, node_lost, host_lost, node_failure: not '
                   'counted).')

_GROUP_SUMS = (
    # name, type, help, attribute summed over the group's nodes
    ('lp_group_restarts_total', 'counter', "Restarts of the group's nodes.", 'restarts'),
    ('lp_group_calls_in_flight', 'gauge', "Calls the group's nodes serve now.", 'in_flight'),
    ('lp_group_resident_memory_bytes', 'gauge', "Resident memory of the group's nodes.",
     'rss_bytes'),
)


def exposition(program: str, nodes: list[NodeStatistics]) -> str:
    """The text a Prometheus scrape of ``/metrics`` gets."""
    big = group_summary.collapsed(nodes, group_summary.SERIES_PER_NODE_MAX)
    lines = _per_node(program, [node for node in nodes if node.label not in big])
    lines += _per_group(program, [node for node in nodes if node.label in big])
    return '\n'.join(lines) + '\n'


def _per_group(program: str, nodes: list[NodeStatistics]) -> list[str]:
    """Series per group: nodes counted by state, sums of counters, calls per method."""
    counts: dict[tuple[str, str], int] = {}
    sums: dict[tuple[str, str], float] = {}
    calls: dict[tuple[str, str], list[int]] = {}
    reasons: dict[tuple[str, str], int] = {}
    for node in nodes:
        counts[node.label, node.state.value] = counts.get((node.label, node.state.value), 0) + 1
        for reason, n in node.restart_reasons.items():
            reasons[node.label, reason] = reasons.get((node.label, reason), 0) + n
        for _, _, _, attribute in _GROUP_SUMS:
            sums[node.label, attribute] = sums.get((node.label, attribute), 0) + (
                getattr(node, attribute) or 0)
        for method in node.methods:
            total = calls.setdefault((node.label, method.name), [0, 0])
            total[0] += method.calls
            total[1] += method.errors
    if not nodes:
        return []
    lines = ['# HELP lp_group_nodes Nodes of the group in each state.',
             '# TYPE lp_group_nodes gauge']
    lines += [f'lp_group_nodes{_labels(program=program, group=g, state=s)} {n}'
              for (g, s), n in sorted(counts.items())]
    for name, kind, text, attribute in _GROUP_SUMS:
        lines += [f'# HELP {name} {text}', f'# TYPE {name} {kind}']
        lines += [f'{name}{_labels(program=program, group=g)} {v}'
                  for (g, a), v in sorted(sums.items()) if a == attribute]
    lines += [f'# HELP lp_group_restarts_by_reason_total {_BY_REASON_HELP}',
              '# TYPE lp_group_restarts_by_reason_total counter']
    lines += [f'lp_group_restarts_by_reason_total{_labels(program=program, group=g, reason=r)} {n}'
              for (g, r), n in sorted(reasons.items())]
    for name, text, position in (('lp_group_calls_total', 'Calls served, per method.', 0),
                                 ('lp_group_call_errors_total', 'Calls that raised.', 1)):
        lines += [f'# HELP {name} {text}', f'# TYPE {name} counter']
        lines += [f'{name}{_labels(program=program, group=g, method=m)} {v[position]}'
                  for (g, m), v in sorted(calls.items())]
    return lines


def _per_node(program: str, nodes: list[NodeStatistics]) -> list[str]:
    lines = ['# HELP lp_node_state 1 for the state the node is in.', '# TYPE lp_node_state gauge']
    for node in nodes:
        for state in NodeState:
            value = 1 if node.state == state else 0
            lines.append(f'lp_node_state{_labels(program=program, node=node.name, state=state.value)}'
                         f' {value}')
    for name, kind, text, attribute in _NODE_METRICS:
        lines += [f'# HELP {name} {text}', f'# TYPE {name} {kind}']
        for node in nodes:
            value = getattr(node, attribute)
            if value is not None:
                lines.append(f'{name}{_labels(program=program, node=node.name)} {value}')
    lines += [f'# HELP lp_node_restarts_by_reason_total {_BY_REASON_HELP}',
              '# TYPE lp_node_restarts_by_reason_total counter']
    lines += [f'lp_node_restarts_by_reason_total{_labels(program=program, node=node.name, reason=r)}'
              f' {n}' for node in nodes for r, n in sorted(node.restart_reasons.items())]
    methods = [(node.name, m) for node in nodes for m in node.methods]
    lines += ['# HELP lp_node_calls_total Calls served, per method.',
              '# TYPE lp_node_calls_total counter']
    lines += [f'lp_node_calls_total{_labels(program=program, node=n, method=m.name)} {m.calls}'
              for n, m in methods]
    lines += ['# HELP lp_node_call_errors_total Calls that raised, per method.',
              '# TYPE lp_node_call_errors_total counter']
    lines += [f'lp_node_call_errors_total{_labels(program=program, node=n, method=m.name)} '
              f'{m.errors}' for n, m in methods]
    lines += ['# HELP lp_node_call_seconds Latency of a sample of calls, per method.',
              '# TYPE lp_node_call_seconds summary']
    for n, m in methods:
        labels = _labels(program=program, node=n, method=m.name)
        quantile = _labels(program=program, node=n, method=m.name, quantile='0.99')
        lines += [f'lp_node_call_seconds{quantile} {m.p99_s}',
                  f'lp_node_call_seconds_sum{labels} {m.total_s}',
                  f'lp_node_call_seconds_count{labels} {m.timed}']
    return lines
