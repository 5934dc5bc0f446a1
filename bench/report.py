"""Prints a ``bench.run`` JSON file as a Markdown table: medians, ratios to the floor.

Rows measured with CPU (bench.cpu) also show CPU µs per call and its ratio to the floor.

    python -m bench.report bench/results.json
"""

from __future__ import annotations

import json
import sys

from .harness import fmt_value
from .run import BASELINE, measure_order

PEERS = ['launchpad', 'launchpad_grpc', 'floor_unix', 'floor_tcp', 'grpc', 'ray', 'memcpy']


def main(path: str) -> None:
    with open(path) as f:
        doc = json.load(f)
    rows: dict[str, dict[str, dict]] = {}
    for r in doc['results']:
        if r['values'] and not r['measure'].startswith('rt_GBps:'):
            rows.setdefault(r['measure'], {})[r['peer']] = r
    ratios = {(x['measure'], x['peer']): x['x_floor'] for x in doc['ratios']}
    cpu_ratios = {(x['measure'], x['peer']): x['cpu_x_floor'] for x in doc.get('cpu_ratios', [])}
    print('| measure | unit | ' + ' | '.join(PEERS) + ' |')
    print('|---|---|' + '---|' * len(PEERS))
    for measure in sorted(rows, key=measure_order):
        cells, unit = [], ''
        for peer in PEERS:
            r = rows[measure].get(peer)
            if r is None:
                cells.append('—')
                continue
            unit = 'MiB' if r['unit'] == 'bytes' else r['unit']
            ratio = ratios.get((measure, peer))
            text = fmt_value(r['median'], r['unit'])
            if ratio is not None and peer != BASELINE:
                text += f' ({ratio:.2g}×)'
            if r.get('cpu_us_per_call_median'):
                cpu_ratio = cpu_ratios.get((measure, peer))
                text += f"; CPU {r['cpu_us_per_call_median']:.3g} µs"
                if cpu_ratio is not None and peer != BASELINE:
                    text += f' ({cpu_ratio:.2g}×)'
            cells.append(text)
        print(f'| {measure} | {unit} | ' + ' | '.join(cells) + ' |')
    meta = doc['meta']
    print(f"\n{meta['started']}, {meta['cpus']} CPUs, Python {meta['python']}, numpy "
          f"{meta['numpy']}, grpcio {meta['grpcio']}, Ray {meta['ray']}; load average "
          f"{meta['loadavg_at_start'][0]:.1f} at start, {meta['loadavg_at_end'][0]:.1f} at end; "
          f"{meta['reps']} repetitions.")


if __name__ == '__main__':
    main(sys.argv[1])
