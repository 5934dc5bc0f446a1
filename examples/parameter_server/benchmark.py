"""python -m examples.parameter_server.benchmark [--output_dir=docs/images]

Sweeps the number of requesters for each topology as local processes,
measures total queries per second (the best of ``--repeats`` runs),
normalizes each topology to its own single-requester QPS, and writes ``param_server_scaling.csv`` and
``param_server_scaling.png`` (the Launchpad paper's Figure 2, on this machine).
Topologies that cannot run here (``cached`` before lp.CacherNode exists) are
reported and left out.
"""

from __future__ import annotations

import csv
import json
import os
import tempfile
import time

from absl import app, flags

import launchpad_py as lp
from examples.parameter_server.program import TOPOLOGIES, make_program

OUTPUT_DIR = flags.DEFINE_string('output_dir', 'docs/images', 'Where the CSV and PNG go.')
REQUESTERS = flags.DEFINE_list('requesters', ['1', '2', '4', '8', '16', '32'],
                               'Requester counts to sweep.')
TOPOLOGY_LIST = flags.DEFINE_list('topologies', list(TOPOLOGIES), 'Topologies to sweep.')
DURATION = flags.DEFINE_float('duration_s', 1.5, 'Seconds each requester measures per point.')
REPEATS = flags.DEFINE_integer('repeats', 2, 'Runs per point; the best QPS counts (the machine '
                               'is shared, so the slower runs measure other load).')
NUM_SERVERS = flags.DEFINE_integer('num_servers', 2, 'Replicas in the replicated topology.')
PARAM_SIZE = flags.DEFINE_integer('param_size', 10_000, 'Length of the float32 parameter vector.')

NAME = 'param_server_scaling'


def run_point(topology: str, num_requesters: int, launch_type: str) -> float:
    """Total QPS of one program run."""
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, 'result.json')
        program = make_program(topology, num_requesters, num_servers=NUM_SERVERS.value,
                               param_size=PARAM_SIZE.value, duration_s=DURATION.value,
                               result_path=path)
        lp.launch(program, launch_type=launch_type).wait(timeout=300)
        with open(path) as f:
            return json.load(f)['qps']


def sweep(launch_type: str) -> list[dict]:
    rows = []
    for topology in TOPOLOGY_LIST.value:
        base = None
        for count in (int(n) for n in REQUESTERS.value):
            qps = max(run_point(topology, count, launch_type) for _ in range(REPEATS.value))
            base = base or qps
            rows.append({'topology': topology, 'num_requesters': count, 'qps': round(qps, 1),
                         'normalized_qps': round(qps / base, 3)})
            print(f'benchmark: {topology:10s} {count:3d} requesters: {qps:8.0f} QPS '
                  f'({qps / base:.2f}× one requester)', flush=True)
    return rows


def write_csv(rows: list[dict], path: str) -> None:
    with open(path, 'w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=['topology', 'num_requesters', 'qps',
                                               'normalized_qps'])
        writer.writeheader()
        writer.writerows(rows)


def plot(rows: list[dict], path: str, launch_type: str) -> None:
    import matplotlib
    matplotlib.use('Agg')
    from matplotlib import pyplot as plt, ticker
    figure, axes = plt.subplots(figsize=(6, 4), dpi=120)
    counts = sorted({r['num_requesters'] for r in rows})
    axes.plot(counts, [c / counts[0] for c in counts], 'k:', label='linear scaling')
    for topology in dict.fromkeys(r['topology'] for r in rows):
        points = [r for r in rows if r['topology'] == topology]
        axes.plot([r['num_requesters'] for r in points], [r['normalized_qps'] for r in points],
                  'o-', label=topology)
    axes.set_xscale('log', base=2)
    axes.set_yscale('log', base=2)
    axes.set_xticks(counts, [str(c) for c in counts])
    axes.yaxis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f'{value:g}'))
    axes.set_xlabel('requesters')
    axes.set_ylabel('QPS / QPS with one requester')
    axes.set_title(f'Parameter-server reads, {launch_type}, {os.cpu_count()} CPU cores')
    axes.legend()
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)


def main(argv):
    del argv
    launch_type = lp.flags.LAUNCH_TYPE.value if flags.FLAGS['lp_launch_type'].present \
        else 'local_mp'
    start = time.monotonic()
    rows = sweep(launch_type)
    os.makedirs(OUTPUT_DIR.value, exist_ok=True)
    csv_path = os.path.join(OUTPUT_DIR.value, NAME + '.csv')
    png_path = os.path.join(OUTPUT_DIR.value, NAME + '.png')
    write_csv(rows, csv_path)
    plot(rows, png_path, launch_type)
    print(f'benchmark: wrote {csv_path} and {png_path} in {time.monotonic() - start:.0f}s',
          flush=True)


if __name__ == '__main__':
    app.run(main)
