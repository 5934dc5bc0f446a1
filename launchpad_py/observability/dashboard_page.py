"""The dashboard's page: server-rendered HTML with an SVG of the graph, and a little JavaScript.

The graph is laid out here, without Graphviz: one column per rank of groups
(callers left of the nodes they call), nodes stacked inside their group's box.
The script polls ``/api/status`` and recolours nodes, fills each node's card
(numbers, three small plots, recent output, the failure's traceback). A group
of more than ``group_summary.COLLAPSE_OVER`` nodes is one box and one card with
its counts by state; opening the card's member list fetches its members a page
at a time (``/api/group``), shown as ordinary cards.
"""

from __future__ import annotations

import html
import json

from launchpad_py.observability import group_summary

_NODE_W, _NODE_H, _GAP, _HEAD, _COL_GAP, _PAD = 170, 36, 8, 22, 90, 14


def _ranks(graph) -> dict[str, int]:
    """Group → column: groups nobody calls further on the right."""
    group_of = {n.name: n.label for n in graph.nodes}
    calls: dict[str, set[str]] = {g: set() for g in graph.groups}
    for edge in graph.edges:
        if group_of[edge.source] != group_of[edge.target]:
            calls[group_of[edge.source]].add(group_of[edge.target])
    depth: dict[str, int] = {}

    def height(group: str, seen: frozenset) -> int:
        if group in depth:
            return depth[group]
        below = [height(g, seen | {group}) for g in calls[group] if g not in seen]
        depth[group] = 1 + max(below, default=-1)
        return depth[group]

    for group in graph.groups:
        height(group, frozenset())
    top = max(depth.values(), default=0)
    return {g: top - d for g, d in depth.items()}


def _big_groups(graph) -> set[str]:
    return {g for g, members in graph.groups.items() if len(members) > group_summary.COLLAPSE_OVER}


def graph_svg(graph) -> str:
    """The program's graph as inline SVG; each node a ``<g data-node=...>`` the script colours,
    a big group one ``<g data-group=...>`` box (its edges drawn once)."""
    columns: dict[int, list[str]] = {}
    for group, column in _ranks(graph).items():
        columns.setdefault(column, []).append(group)
    kinds = {n.name: n.kind for n in graph.nodes}
    big = _big_groups(graph)
    places: dict[str, tuple[int, int]] = {}
    parts, height = [], 0
    for column in sorted(columns):
        x, y = _PAD + column * (_NODE_W + 2 * _PAD + _COL_GAP), _PAD
        for group in columns[column]:
            members = graph.groups[group]
            shown = 1 if group in big else len(members)
            box_h = _HEAD + shown * (_NODE_H + _GAP) + _PAD
            parts.append(f'<g class="group"><rect x="{x - _PAD}" y="{y}" width="{_NODE_W + 2 * _PAD}" '
                         f'height="{box_h}" rx="8"/><text x="{x}" y="{y + 16}" class="glabel">'
                         f'{html.escape(group)}</text></g>')
            ny = y + _HEAD
            if group in big:
                parts.append(_box(x, ny, f'data-group="{html.escape(group)}"',
                                  f'{len(members)} nodes', '', 'gcounts'))
                places.update((name, (x, ny)) for name in members)
            for name in members if group not in big else ():
                places[name] = (x, ny)
                parts.append(_box(x, ny, f'data-node="{html.escape(name)}"', name,
                                  kinds[name][:28], 'nkind'))
                ny += _NODE_H + _GAP
            y += box_h + _PAD
        height = max(height, y)
    width = _PAD + len(columns) * (_NODE_W + 2 * _PAD + _COL_GAP)
    lines = {}
    for edge in graph.edges:
        (sx, sy), (tx, ty) = places[edge.source], places[edge.target]
        x1, x2 = (sx + _NODE_W, tx) if tx > sx else (sx, tx + _NODE_W)
        lines.setdefault((x1, sy, x2, ty), (
            f'<line x1="{x1}" y1="{sy + _NODE_H / 2}" x2="{x2}" y2="{ty + _NODE_H / 2}" '
            f'marker-end="url(#arrow)"><title>{html.escape(edge.argument)}</title></line>'))
    return (f'<svg id="graph" width="{width}" height="{height}" viewBox="0 0 {width} {height}">'
            '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
            'markerHeight="7" orient="auto"><path d="M0,0L10,5L0,10z"/></marker></defs>'
            f'{"".join(parts)}<g class="edges">{"".join(lines.values())}</g></svg>')


def _box(x: int, y: int, data: str, title: str, text: str, text_class: str) -> str:
    return (f'<g class="gnode state-starting" {data}>'
            f'<rect x="{x}" y="{y}" width="{_NODE_W}" height="{_NODE_H}" rx="6"/>'
            f'<text x="{x + 8}" y="{y + 15}" class="nname">{html.escape(title)}</text>'
            f'<text x="{x + 8}" y="{y + 29}" class="{text_class}">{html.escape(text)}</text></g>')


def _group_card(group: str, size: int) -> str:
    label = html.escape(group)
    return f'''<section class="card group-card" data-group="{label}" data-offset="0">
<h3>{label} <span class="size">{size} nodes</span></h3>
<div class="counts"></div><div class="failed-names"></div>
<details class="members"><summary>members</summary>
<div class="pager"><button class="prev">previous</button> <span class="range"></span>
<button class="next">next</button></div><div class="member-cards"></div></details>
</section>'''


def _card(name: str, kind: str) -> str:
    name, kind = html.escape(name), html.escape(kind)
    return f'''<section class="card" data-node="{name}">
<h3>{name} <span class="state state-starting">starting</span></h3>
<div class="kind">{kind}</div>
<table class="stats"></table>
<div class="plots">
<figure><svg class="spark" data-series="calls_per_s"></svg><figcaption>calls/s</figcaption></figure>
<figure><svg class="spark" data-series="cpu_percent"></svg><figcaption>CPU %</figcaption></figure>
<figure><svg class="spark" data-series="rss_bytes"></svg><figcaption>RSS</figcaption></figure>
</div>
<table class="methods"></table>
<details open><summary>recent output</summary><pre class="log"></pre></details>
<div class="failure" hidden><h4>last failure</h4><pre class="traceback"></pre></div>
</section>'''


def render(graph, report: dict, token: str) -> str:
    title = html.escape(f'launchpad_py · {report["program"]}')
    big = _big_groups(graph)
    cards = '\n'.join([_group_card(g, len(graph.groups[g])) for g in graph.groups if g in big]
                      + [_card(n.name, n.kind) for n in graph.nodes if n.label not in big])
    member_card = _card('__NODE__', '__KIND__')
    return f'''<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title><style>{_CSS}</style></head>
<body><header><h1>{title}</h1><span id="summary">{html.escape(report["launch_type"])}</span></header>
<main><div id="graph-box">{graph_svg(graph)}</div><div id="cards">{cards}</div></main>
<script>const TOKEN = {json.dumps(token)};const MEMBER_CARD = {json.dumps(member_card)};
{_JS}</script></body></html>'''


_CSS = '''
body{font:13px/1.4 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#222}
header{background:#263238;color:#fff;padding:8px 16px;display:flex;gap:16px;align-items:baseline}
h1{font-size:17px;margin:0}main{padding:12px 16px}#graph-box{background:#fff;border:1px solid #ddd;
border-radius:8px;padding:8px;margin-bottom:12px;overflow:auto}
.group rect{fill:#fafbfc;stroke:#9aa;stroke-dasharray:4 3}.glabel{font-weight:600;fill:#456}
.gnode rect{stroke:#555;stroke-width:1}.nname{font-weight:600}.nkind{font-size:10px;fill:#333}
.edges line{stroke:#777;stroke-width:1.2}marker path{fill:#777}
.state-starting rect,.state.state-starting{fill:#f5d76e;background:#f5d76e}
.state-running rect,.state.state-running{fill:#7bd389;background:#7bd389}
.state-restarting rect,.state.state-restarting{fill:#f7b267;background:#f7b267}
.state-finished rect,.state.state-finished{fill:#9ecbf0;background:#9ecbf0}
.state-stopped rect,.state.state-stopped{fill:#cfcfcf;background:#cfcfcf}
.state-failed rect,.state.state-failed{fill:#f28b82;background:#f28b82}
.state-killed rect,.state.state-killed{fill:#b39ddb;background:#b39ddb}
.state-left_running rect,.state.state-left_running{fill:#e6a0c4;background:#e6a0c4}
#cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(380px,1fr));gap:12px}
.card{background:#fff;border:1px solid #ddd;border-radius:8px;padding:8px 12px}
.card h3{margin:0 0 2px;font-size:14px}.state{padding:1px 8px;border-radius:9px;font-size:12px}
.kind{color:#667;font-size:12px}table{border-collapse:collapse;margin:6px 0;font-size:12px}
td,th{padding:1px 8px 1px 0;text-align:left}.plots{display:flex;gap:8px}
figure{margin:0}figcaption{font-size:11px;color:#667}.spark{width:110px;height:34px;
background:#f3f6fa;border-radius:4px}.spark polyline{fill:none;stroke:#1e88e5;stroke-width:1.5}
.group-card{grid-column:1/-1}.counts .state{margin-right:6px}.member-cards{display:grid;
grid-template-columns:repeat(auto-fill,minmax(380px,1fr));gap:12px;margin-top:8px}
pre{background:#111;color:#ddd;padding:6px;border-radius:4px;max-height:160px;overflow:auto;
font-size:11px;margin:4px 0;white-space:pre-wrap}.traceback{background:#3b0d0d;color:#ffd7d7;max-height:260px}
'''

_JS = '''
const fmt = {
  bytes: v => v == null ? '-' : v < 1024 ? v + ' B' : v < 1048576 ? (v / 1024).toFixed(1) + ' KiB'
    : (v / 1048576).toFixed(1) + ' MiB',
  num: (v, d) => v == null ? '-' : Number(v).toFixed(d),
  ms: v => v == null ? '-' : (v * 1e3).toFixed(2) + ' ms',
};
function rows(table, data) {
  table.innerHTML = data.map(r => '<tr>' + r.map((c, i) => (i ? '<td>' : '<th>') +
    String(c).replace(/[&<>]/g, ch => ({'&': '&amp;', '<': '&lt;', '>': '&gt;'}[ch])) +
    (i ? '</td>' : '</th>')).join('') + '</tr>').join('');
}
function spark(svg, points, key) {
  const values = points.map(p => p[key]).filter(v => v != null);
  if (values.length < 2) { svg.innerHTML = ''; return; }
  const max = Math.max(...values, 1e-9), w = 110, h = 34;
  const xy = values.map((v, i) => (i * w / (values.length - 1)).toFixed(1) + ',' +
    (h - 2 - v / max * (h - 4)).toFixed(1));
  svg.innerHTML = '<polyline points="' + xy.join(' ') + '"/>';
}
function setState(el, state) {
  el.className.baseVal !== undefined
    ? el.setAttribute('class', 'gnode state-' + state)
    : (el.className = 'state state-' + state, el.textContent = state);
}
function restarts(node) {  // '3', or '3 (evicted 1)': the platform's, not counted
  const lost = Object.entries(node.restart_reasons || {}).filter(([why]) => why !== 'failed');
  return lost.length ? node.restarts + ' (' + lost.map(([why, n]) => why + ' ' + n).join(', ') + ')'
                     : node.restarts;
}

function show(node) {
  const card = document.querySelector('.card[data-node="' + node.name + '"]');
  const box = document.querySelector('#graph g[data-node="' + node.name + '"]');
  if (box) setState(box, node.state);
  if (!card) return;
  setState(card.querySelector('.state'), node.state);
  card.dataset.state = node.state;
  rows(card.querySelector('.stats'), [
    ['host', node.host + (node.pid ? ' · pid ' + node.pid : ''), 'uptime', fmt.num(node.uptime_s, 0) + ' s'],
    ['calls', node.calls == null ? '-' : node.calls, 'calls/s', fmt.num(node.calls_per_s, 1)],
    ['in flight', node.in_flight == null ? '-' : node.in_flight, 'restarts', restarts(node)],
    ['bytes in', fmt.bytes(node.bytes_in), 'bytes out', fmt.bytes(node.bytes_out)],
    ['RSS', fmt.bytes(node.rss_bytes), 'CPU', fmt.num(node.cpu_percent, 0) + ' %'],
  ]);
  rows(card.querySelector('.methods'), node.methods.length ? [['method', 'calls', 'errors', 'mean', 'p99']]
    .concat(node.methods.map(m => [m.name, m.calls, m.errors, fmt.ms(m.mean_s), fmt.ms(m.p99_s)])) : []);
  card.querySelectorAll('.spark').forEach(svg => spark(svg, node.history, svg.dataset.series));
  const log = card.querySelector('.log');
  log.textContent = node.output.join('\\n') || '(no output yet)';
  log.scrollTop = log.scrollHeight;
  const failure = card.querySelector('.failure');
  failure.hidden = !node.traceback;
  const traceback = card.querySelector('.traceback');
  if (traceback.textContent !== (node.traceback || '')) {  // Its last line says what was raised.
    traceback.textContent = node.traceback || '';
    traceback.scrollTop = traceback.scrollHeight;
  }
}
const PAGE = 50;
const ORDER = ['failed', 'killed', 'left_running', 'restarting', 'starting', 'running',
               'finished', 'stopped'];
const esc = s => String(s).replace(/[&<>"]/g, ch => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'}[ch]));
function showGroup(label, group) {
  const states = Object.entries(group.states).sort((a, b) => ORDER.indexOf(a[0]) - ORDER.indexOf(b[0]));
  const text = states.map(([s, n]) => s + ' ' + n).join(' · ');
  const box = document.querySelector('#graph g[data-group="' + label + '"]');
  if (box && states.length) {
    box.setAttribute('class', 'gnode state-' + states[0][0]);
    box.querySelector('.gcounts').textContent = text;
  }
  const card = document.querySelector('.group-card[data-group="' + label + '"]');
  if (!card) return;
  card.dataset.counts = text;
  card.querySelector('.counts').innerHTML = states.map(([s, n]) =>
    '<span class="state state-' + s + '">' + s + ' ' + n + '</span>').join('');
  card.querySelector('.failed-names').textContent = group.failed.length ?
    'failed: ' + group.failed.join(', ') : '';
  if (card.querySelector('.members').open) loadMembers(card);
}
async function loadMembers(card) {
  const offset = Number(card.dataset.offset);
  const reply = await fetch('/api/group?token=' + encodeURIComponent(TOKEN) + '&label=' +
    encodeURIComponent(card.dataset.group) + '&offset=' + offset + '&limit=' + PAGE, {cache: 'no-store'});
  const page = await reply.json();
  const box = card.querySelector('.member-cards');
  const names = page.members.map(m => m.name).join(',');
  if (box.dataset.names !== names) {  // Cards are rebuilt only when the page shows others.
    box.innerHTML = page.members.map(m => MEMBER_CARD.replace(/__NODE__/g, esc(m.name))
      .replace(/__KIND__/g, esc(m.host))).join('');
    box.dataset.names = names;
  }
  page.members.forEach(show);
  card.querySelector('.range').textContent = page.members.length ?
    (offset + 1) + '–' + (offset + page.members.length) + ' of ' + page.size : 'none';
  card.dataset.size = page.size;
}
document.querySelectorAll('.group-card').forEach(card => {
  card.querySelector('.members').addEventListener('toggle', e => { if (e.target.open) loadMembers(card); });
  card.querySelector('.prev').onclick = () => {
    card.dataset.offset = Math.max(0, Number(card.dataset.offset) - PAGE); loadMembers(card); };
  card.querySelector('.next').onclick = () => {
    const next = Number(card.dataset.offset) + PAGE;
    if (next < Number(card.dataset.size || 0)) { card.dataset.offset = next; loadMembers(card); } };
});
async function poll() {
  try {
    const reply = await fetch('/api/status?token=' + encodeURIComponent(TOKEN), {cache: 'no-store'});
    const report = await reply.json();
    report.nodes.forEach(show);
    Object.entries(report.groups || {}).forEach(([label, group]) => showGroup(label, group));
    document.getElementById('summary').textContent = report.launch_type + ' · ' +
      (report.running ? 'running' : 'ended') + ' · ' + new Date().toLocaleTimeString();
    document.body.dataset.polled = String(Number(document.body.dataset.polled || 0) + 1);
  } catch (e) { document.getElementById('summary').textContent = 'launcher unreachable'; }
  setTimeout(poll, 1000);
}
poll();
'''
