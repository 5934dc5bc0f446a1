"""Plots array round-trip bandwidth against size from a ``bench.run`` JSON file.

    python -m bench.plot bench/results.json docs/images/bandwidth.png
"""

from __future__ import annotations

import json
import sys

from .run import SIZES

LABELS = {'launchpad': 'launchpad_py (same host)', 'launchpad_grpc': 'launchpad_py (gRPC)',
          'floor_unix': 'Unix socket + pickle-5 (floor)', 'floor_tcp': 'TCP + pickle-5',
          'grpc': 'raw grpcio', 'ray': 'Ray', 'memcpy': 'one memcpy (ceiling)'}


def main(source: str, target: str) -> None:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    with open(source) as f:
        doc = json.load(f)
    series: dict[str, list[tuple[int, float, float, float]]] = {}
    for r in doc['results']:
        if r['measure'].startswith('rt_GBps:') and r['values']:
            size = SIZES[r['measure'].split(':', 1)[1]]
            series.setdefault(r['peer'], []).append((size, r['median'], r['min'], r['max']))
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for peer, points in sorted(series.items()):
        points.sort()
        sizes = [p[0] for p in points]
        medians = [p[1] for p in points]
        errors = [[p[1] - p[2] for p in points], [p[3] - p[1] for p in points]]
        style = '--' if peer == 'memcpy' else '-'
        axes.errorbar(sizes, medians, yerr=errors, fmt=style + 'o', capsize=3, markersize=4,
                      label=LABELS.get(peer, peer))
    axes.set_xscale('log', base=2)
    axes.set_yscale('log')
    axes.set_xlabel('float32 array size (bytes), returned unchanged')
    axes.set_ylabel('array bytes / round-trip time (GB/s)')
    axes.set_title(f"Array round trip ({doc['meta']['started'][:16]}, "
                   f"{doc['meta']['cpus']} CPUs), median and min-max", fontsize=10)
    axes.grid(True, which='both', alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(target, dpi=120)


if __name__ == '__main__':
    main(sys.argv[1], sys.argv[2])
