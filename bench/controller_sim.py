"""The controller with 10,000 and 100,000 simulated workers: what each node costs the launcher.

    python -m bench.controller_sim --json bench/controller_sim.json          # 10,000, 100,000

Each size runs in a process of its own (``--one N``), so memory is that size's
alone. The program is ``bench/sim_workers.ring_program``: N workers, each
holding handles to a learner and its two ring neighbours, run by simulated
workers (no process, socket or thread per node). Measured:

- build: making the program (``add_node`` N times);
- ready: ``launch`` until every node reported ready: the address book filled
  (each worker reports its address) and sent (each asks for its 3 peers');
- CPU and memory per node: the launching process's CPU time over the launch,
  and its peak RSS growth (``ru_maxrss``), divided by N;
- statuses, statistics: one ``controller.statuses()`` and ``statistics()``;
- dashboard: one sample (``refresh``) and the page and ``/api/status`` built
  from it (bytes); Prometheus: the ``/metrics`` text (bytes, lines);
- stop: ``stop()`` until ``wait()`` returned.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

from bench import sim_workers
from launchpad_py.observability import dashboard
from launchpad_py.program import graph as program_graph


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _timed(function):
    start = time.perf_counter()
    value = function()
    return value, time.perf_counter() - start


def one(workers: int) -> dict:
    """Every figure for ``workers`` simulated workers, in this process."""
    rss_before = _rss_mib()
    (program, references), build_s = _timed(lambda: sim_workers.ring_program(workers))
    cpu_before = time.process_time()
    (controller, sims), ready_s = _timed(lambda: sim_workers.launch(program, references))
    cpu_s = time.process_time() - cpu_before
    wrong = sum(1 for w in sims if sorted(w.received) != sorted(references[w.name]))
    statuses, statuses_s = _timed(controller.statuses)
    _, statistics_s = _timed(lambda: controller.statistics(timeout=5))
    board = dashboard.Dashboard(controller, program_graph.structure(program), interval=3600)
    try:
        report, refresh_s = _timed(board.refresh)
        page, page_s = _timed(board.page)
        metrics, metrics_s = _timed(board.metrics_text)
        status_json = json.dumps(report)
    finally:
        board.close()
    rss_mib = _rss_mib() - rss_before
    _, stop_s = _timed(lambda: (controller.stop(), controller.wait(timeout=600)))
    return {'workers': workers, 'nodes': len(sims), 'build_s': build_s, 'ready_s': ready_s,
            'launch_cpu_s': cpu_s, 'cpu_us_per_node': cpu_s / len(sims) * 1e6,
            'peak_rss_growth_mib': rss_mib, 'kib_per_node': rss_mib * 1024 / len(sims),
            'nodes_with_wrong_addresses': wrong, 'addresses_sent': sum(
                len(w.received) for w in sims),
            'statuses_s': statuses_s, 'statuses': len(statuses), 'statistics_s': statistics_s,
            'dashboard_sample_s': refresh_s, 'dashboard_page_s': page_s,
            'dashboard_page_bytes': len(page), 'api_status_bytes': len(status_json),
            'prometheus_s': metrics_s, 'prometheus_bytes': len(metrics),
            'prometheus_lines': metrics.count('\n'), 'stop_s': stop_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--workers', default='10000,100000')
    parser.add_argument('--one', type=int, help='run one size here and print its JSON')
    parser.add_argument('--json', help='also write the results to this file')
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one)))
        return
    points = []
    for workers in [int(n) for n in args.workers.split(',')]:
        done = subprocess.run([sys.executable, '-m', 'bench.controller_sim', '--one', str(workers)],
                              capture_output=True, text=True, timeout=3600)
        if done.returncode != 0:
            raise SystemExit(done.stderr[-3000:])
        points.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(json.dumps(points[-1]), file=sys.stderr, flush=True)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'machine': {'cpus': os.cpu_count(), 'python': platform.python_version(),
                                   'load_average_at_end': os.getloadavg(),
                                   'shared': 'shared with 2 other helpers running tests'},
                       'points': points}, f, indent=2)


if __name__ == '__main__':
    main()
