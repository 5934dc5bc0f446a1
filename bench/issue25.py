"""Issue 25 in one command: every figure of its scale targets, measured in one run, each beside
its target.

    python -m bench.issue25 --json bench/issue25.json          # full size: ~30 min, whole machine
    python -m bench.issue25 --nodes 300 --reps 3 --json /tmp/issue25_300.json   # mid-size
    python -m bench.issue25 --quick --json /tmp/issue25_quick.json    # tiny sizes, < 1 min

It calls the benches that measure the issue, one after the other, each in a process of its
own (the figures come from them; nothing is measured twice here):

- ``bench.scale``: local_mp, local_mt, ssh and slurm at 10 to 2,000 nodes (ready, peak USS,
  stop, fan-out and fan-in calls/s);
- the same bench's fan-in on local_mp, launched with the soft ``RLIMIT_NOFILE`` at 1,024 (the
  default of a login shell: the launcher and the server must raise it themselves to hold 1,000
  connections);
- ``bench.scale_kubernetes``: 1,000 nodes against the fake API server, packed 10 and 50 a pod;
- ``bench.controller_sim``: the controller with 10,000 and 100,000 simulated workers.

"Flat per node" (issue 25: no step or superlinear growth of launch-to-ready, for every
launcher) is judged per launch type from the sizes of ``FLAT_FROM`` (100) nodes up: the ready
time per node at the largest size is at most ``FLAT_FACTOR`` (1.25) times the median ready
time per node of the smaller ones (below 100 nodes a launch's fixed cost dominates the per-node
time; with fewer than two sizes from 100 up it is reported, not judged). Each local point is
measured after ``bench.scale --warm_memory`` wrote and freed the memory its launch will need:
on the shared VM, memory free for long costs 3-5 times as much to write as memory freed a
moment ago, so without it the largest launch alone meets cold memory (a step of the machine,
not of the launcher; docs/performance.md, stop 44). The seconds the warming took are kept in
each point's ``memory_warmed``.

The JSON keeps each bench's own output under ``parts`` and one row per figure under
``figures``: its value, its target and ``met`` (true or false; null where the issue asks only
that it be reported). Thresholds are judged at 1,000 nodes, or at the largest size measured
when the run is scaled down (``nodes`` in each row says which). Exit status 1 when a target
is not met.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import psutil

from launchpad_py.launchers.options import LaunchOptions

SIZES = {
    'full': {'launch_types': 'local_mp,local_mt,ssh,slurm', 'nodes': '10,100,300,1000,2000',
             'reps': 20, 'reps_remote': 2, 'kubernetes': [1000], 'per_pod': [10, 50],
             'workers': '10000,100000'},
    'quick': {'launch_types': 'local_mp,local_mt', 'nodes': '3', 'reps': 1, 'reps_remote': 1,
              'kubernetes': [2], 'per_pod': [1, 2], 'workers': '100,300'},
}
TARGET_NODES = 1000  # Where the issue sets its thresholds.
SOFT_NOFILE = 1024
GIB_LIMIT = 10.0
READY_LIMIT_S = {'local_mp': 20.0, 'local_mt': 20.0, 'ssh': 30.0, 'slurm': 30.0}
FLAT_FROM = 100  # Sizes from here up are judged for a flat per-node curve.
FLAT_FACTOR = 1.25
STOP_LIMIT_S = {'local_mp': LaunchOptions().grace + 2, 'local_mt': LaunchOptions().grace + 2,
                'ssh': 10.0}  # slurm's stop: reported (the issue sets no limit).


def _row(part: str, figure: str, nodes, value, target: str | None, met: bool | None) -> dict:
    return {'part': part, 'figure': figure, 'nodes': nodes, 'value': value, 'target': target,
            'met': met}


def _at_most(part, figure, nodes, value, limit, unit) -> dict:
    value = None if value is None else round(value, 3)
    if limit is None:
        return _row(part, figure, nodes, value, None, None)
    return _row(part, figure, nodes, value, f'<= {limit:g} {unit}',
                value is not None and value <= limit)


def _fan_in_row(part: str, nodes, fan_in: dict | None) -> dict:
    """Fan-in works: every client's every call answered; its rate is reported beside it."""
    if not fan_in:
        return _row(part, 'fan-in: all calls answered', nodes, None, 'all', False)
    if 'error' in fan_in:
        return _row(part, 'fan-in: all calls answered', nodes, fan_in['error'], 'all', False)
    rate = fan_in['fan_in_calls_per_s']
    value = f"{fan_in['calls']} of {fan_in['expected_calls']}, {rate or 0:,.0f} calls/s"
    return _row(part, 'fan-in: all calls answered', nodes, value, 'all',
                fan_in['calls'] == fan_in['expected_calls'])


def judge_scale(scale: dict, part: str = 'scale') -> list[dict]:
    """Rows for bench.scale's points; thresholds at the judged size of each launch type."""
    rows = []
    points = scale.get('points', [])
    for point in points:
        kind, nodes = point['launch_type'], point['nodes']
        sizes = [p['nodes'] for p in points if p['launch_type'] == kind]
        judged = nodes == max([n for n in sizes if n <= TARGET_NODES] or [min(sizes)])
        name = f'{part} {kind}'
        rows.append(_row(name, 'launches with every call answered', nodes,
                         f"{point['succeeded']} of {point['launches']}", 'all',
                         point['launches'] > 0 and point['succeeded'] == point['launches']))
        for figure, key, limits, unit in (
                ('ready, median', 'ready_s_median', READY_LIMIT_S, 's'),
                ('peak USS, max', 'peak_uss_gib_max',
                 {'local_mp': GIB_LIMIT, 'local_mt': GIB_LIMIT}, 'GiB'),
                ('stop, max', 'stop_s_max', STOP_LIMIT_S, 's')):
            limit = limits.get(kind) if judged else None
            rows.append(_at_most(name, figure, nodes, point.get(key), limit, unit))
        rows.append(_row(name, 'ready per node, ms', nodes,
                         _rounded(point.get('ready_ms_per_node_median')), None, None))
        rows.append(_row(name, 'fan-out calls/s', nodes,
                         _rounded(point.get('fan_out_calls_per_s_median')), None, None))
        if 'fan_in' in point:
            rows.append(_fan_in_row(name, nodes, point['fan_in']))
    kinds = dict.fromkeys(point['launch_type'] for point in points)
    return rows + [judge_flat(f'{part} {kind}', [p for p in points if p['launch_type'] == kind])
                   for kind in kinds]


def judge_flat(name: str, points: list[dict]) -> dict:
    """Flat per node: ready ms/node at the largest size from ``FLAT_FROM`` nodes up is at most
    ``FLAT_FACTOR`` x the median of the smaller sizes' (a step or superlinear growth is not)."""
    per_node = {p['nodes']: p['ready_ms_per_node_median'] for p in points
                if p['nodes'] >= FLAT_FROM and p.get('ready_ms_per_node_median') is not None}
    figure = 'ready per node flat, ms (largest size)'
    if len(per_node) < 2:
        largest = max(per_node, default=None)
        return _row(name, figure, largest, _rounded(per_node.get(largest)), None, None)
    largest = max(per_node)
    median = statistics.median(v for n, v in per_node.items() if n != largest)
    limit = FLAT_FACTOR * median
    return _row(name, figure, largest, _rounded(per_node[largest]),
                f'<= {FLAT_FACTOR:g} x median {median:.2f} ({limit:.2f})',
                per_node[largest] <= limit)


def judge_kubernetes(kube: dict) -> list[dict]:
    """Each launch ready, and stopped within its grace (no node killed at its end)."""
    rows = []
    for point in kube.get('points', []):
        name = f"kubernetes, {point['nodes_per_pod']} a pod"
        nodes = point['nodes']
        failed = point.get('failed')
        rows.append(_row(name, 'launch ready', nodes, failed or f"{point['ready_s']} s",
                         'ready', failed is None))
        if failed is None:
            rows.append(_row(name, 'nodes killed at the end of the grace', nodes,
                             point['killed_at_grace_end'], '0',
                             point['killed_at_grace_end'] == 0))
            for figure, key in (('created, s', 'created_s'), ('stop, s', 'stop_s'),
                                ('ready per node, ms', 'ready_per_node_ms'),
                                ('peak PSS, GiB', 'peak_pss_gib')):
                rows.append(_row(name, figure, nodes, point[key], None, None))
    return rows


def judge_controller(sim: dict) -> list[dict]:
    """Every worker gets its peers' addresses only, statuses list all, the views stay bounded."""
    rows = []
    points = sim.get('points', [])
    for point in points:
        nodes = point['nodes']
        rows.append(_row('controller sim', 'nodes with wrong addresses', nodes,
                         point['nodes_with_wrong_addresses'], '0',
                         point['nodes_with_wrong_addresses'] == 0))
        rows.append(_row('controller sim', 'addresses sent (per edge, not N^2)', nodes,
                         point['addresses_sent'], f'<= 3 per node ({3 * nodes})',
                         point['addresses_sent'] <= 3 * nodes))
        rows.append(_row('controller sim', 'statuses listed', nodes, point['statuses'],
                         str(nodes), point['statuses'] == nodes))
        for figure, key in (('ready, s', 'ready_s'), ('launch CPU per node, us',
                                                      'cpu_us_per_node'),
                            ('memory per node, KiB', 'kib_per_node'), ('stop, s', 'stop_s')):
            rows.append(_row('controller sim', figure, nodes, _rounded(point[key]), None, None))
    if len(points) > 1:  # Groups collapse: the page and /metrics do not grow with the workers.
        small, large = points[0], points[-1]
        for figure, key in (('dashboard page bytes', 'dashboard_page_bytes'),
                            ('prometheus lines', 'prometheus_lines')):
            rows.append(_row('controller sim', figure, large['nodes'], large[key],
                             f"<= 1.5 x at {small['nodes']} ({small[key]})",
                             large[key] <= 1.5 * small[key]))
    return rows


def _rounded(value):
    return None if value is None else round(value, 2)


def _soft_nofile() -> None:
    """In the child before exec: the soft open-file limit of a default login shell."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    soft = SOFT_NOFILE if hard == resource.RLIM_INFINITY else min(SOFT_NOFILE, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def run_part(module: str, args: list[str], out: str, timeout: float, **popen) -> dict:
    """``python -m module args`` (its progress on our stderr); its JSON, or why there is none."""
    started, load = time.time(), os.getloadavg()
    part = subprocess.Popen([sys.executable, '-m', module, *args], stdout=sys.stderr,
                            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            **popen)
    try:
        code = part.wait(timeout=timeout)
    except subprocess.TimeoutExpired:  # Killed with every process it started, not alone.
        for process in [*psutil.Process(part.pid).children(recursive=True),
                        psutil.Process(part.pid)]:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        part.wait()
        code = f'killed after {timeout:g} s'
    meta = {'command': [module, *args], 'exit': code, 'seconds': round(time.time() - started, 1),
            'load_average': {'start': [round(x, 2) for x in load],
                             'end': [round(x, 2) for x in os.getloadavg()]}}
    try:
        with open(out) as f:
            return {**json.load(f), 'run': meta}
    except (FileNotFoundError, json.JSONDecodeError) as exc:
        return {'points': [], 'run': meta, 'error': f'no results: {exc}'}


def measure(size: dict, args, scratch: str) -> dict:
    """Runs every part in sequence; the parts' JSON by name."""
    limit = args.part_timeout
    scale_args = ['--launch_types', size['launch_types'], '--nodes', size['nodes'],
                  '--reps', str(size['reps']), '--reps_remote', str(size['reps_remote']),
                  '--max_remote_nodes', str(TARGET_NODES), '--reps_over', f'{TARGET_NODES}:1',
                  '--warm_memory']
    parts = {'scale': run_part('bench.scale', [*scale_args, '--json', f'{scratch}/scale.json'],
                               f'{scratch}/scale.json', limit)}
    fan_in_nodes = min(TARGET_NODES, max(int(n) for n in size['nodes'].split(',')))
    parts['fan_in_soft_nofile_1024'] = run_part(
        'bench.scale', ['--launch_types', 'local_mp', '--nodes', str(fan_in_nodes), '--reps', '0',
                        '--fan_in_max_nodes', str(fan_in_nodes),
                        '--json', f'{scratch}/nofile.json'],
        f'{scratch}/nofile.json', limit, preexec_fn=_soft_nofile)
    parts['kubernetes'] = run_part(
        'bench.scale_kubernetes', ['--nodes', *map(str, size['kubernetes']), '--nodes_per_pod',
                                   *map(str, size['per_pod']), '--json', f'{scratch}/k8s.json'],
        f'{scratch}/k8s.json', limit)
    parts['controller_sim'] = run_part(
        'bench.controller_sim', ['--workers', size['workers'], '--json', f'{scratch}/sim.json'],
        f'{scratch}/sim.json', limit)
    return parts


def judge_runs(parts: dict, launch_types: list[str]) -> list[dict]:
    """Each part ran to its end and measured something (a part that died leaves no points, and
    no figure would say so); bench.scale measured every launch type asked of it."""
    rows = []
    for name, part in parts.items():
        points = part.get('points', [])
        rows.append(_row('run', f"{name} ran to its end", None,
                         part.get('error') or f"exit {part['run']['exit']}, {len(points)} points",
                         'exit 0, points', part['run']['exit'] == 0 and bool(points)))
    measured = {p['launch_type'] for p in parts['scale'].get('points', [])}
    for kind in launch_types:
        rows.append(_row('run', f'scale measured {kind}', None, kind in measured, 'True',
                         kind in measured))
    return rows


def figures(parts: dict, launch_types: list[str]) -> list[dict]:
    nofile = [_fan_in_row(f'fan-in, soft RLIMIT_NOFILE {SOFT_NOFILE}, local_mp', p['nodes'],
                          p.get('fan_in')) for p in parts['fan_in_soft_nofile_1024']['points']]
    return (judge_runs(parts, launch_types) + judge_scale(parts['scale']) + nofile
            + judge_kubernetes(parts['kubernetes']) + judge_controller(parts['controller_sim']))


def print_table(rows: list[dict]) -> None:
    mark = {True: 'met', False: 'NOT MET', None: 'reported'}
    print(f"{'part':<44} {'figure':<36} {'nodes':>7} {'value':>30} {'target':>24}  met")
    for r in rows:
        nodes = '' if r['nodes'] is None else f"{r['nodes']:,}"
        value = str(r['value'])[:30]
        print(f"{r['part']:<44} {r['figure']:<36} {nodes:>7} {value:>30} "
              f"{r['target'] or '':>24}  {mark[r['met']]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--quick', action='store_true', help='tiny sizes, local launchers only')
    parser.add_argument('--nodes', help="bench.scale's node counts (e.g. 300: a mid-size run; "
                        'the fan-in under the soft limit and Kubernetes use the largest)')
    parser.add_argument('--launch_types', help="bench.scale's launch types")
    parser.add_argument('--reps', type=int, help='launches per local point (full size: 20)')
    parser.add_argument('--part_timeout', type=float, default=3600,
                        help='seconds each part may run before it is killed')
    parser.add_argument('--json', help='write the parts and the figures here')
    args = parser.parse_args()
    size = dict(SIZES['quick' if args.quick else 'full'])
    if args.nodes:
        size['nodes'] = args.nodes
        size['kubernetes'] = [max(int(n) for n in args.nodes.split(','))]
    if args.reps:
        size['reps'] = args.reps
    if args.launch_types:
        size['launch_types'] = args.launch_types
    started = time.time()
    with tempfile.TemporaryDirectory(prefix='lp-issue25-') as scratch:
        parts = measure(size, args, scratch)
    rows = figures(parts, size['launch_types'].split(','))
    result = {'machine': {'cpus': os.cpu_count(), 'python': platform.python_version()},
              'command': sys.argv[1:], 'sizes': size, 'target_nodes': TARGET_NODES,
              'started': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(started)),
              'seconds': round(time.time() - started, 1),
              'all_met': all(r['met'] is not False for r in rows),
              'figures': rows, 'parts': parts}
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(result, f, indent=1)
            f.write('\n')
    print_table(rows)
    sys.exit(0 if result['all_met'] else 1)


if __name__ == '__main__':
    main()
