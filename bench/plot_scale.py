"""Plots ready time, ready time per node and peak USS against nodes from ``bench.scale`` JSON
files (the last argument is the image): one curve per launch type found in them.

A flat per-node curve is what "cost grows linearly with nodes" looks like; a rise
at the right end is the superlinear growth issue 25 asks to remove.

    python -m bench.plot_scale bench/scale.json docs/images/scale.png
    python -m bench.plot_scale bench/scale_ssh.json bench/scale_slurm.json docs/images/scale_hosts.png
"""

from __future__ import annotations

import json
import sys


def main(*paths: str) -> None:
    *sources, target = paths
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    points = []
    for source in sources:
        with open(source) as f:
            points += json.load(f)['points']
    figure, (ready_axes, per_node_axes, memory_axes) = plt.subplots(1, 3, figsize=(15, 4))
    for launch_type in sorted({p['launch_type'] for p in points}):
        mine = sorted((p for p in points if p['launch_type'] == launch_type
                       and 'ready_s_median' in p), key=lambda p: p['nodes'])
        nodes = [p['nodes'] for p in mine]
        ready_axes.plot(nodes, [p['ready_s_median'] for p in mine], 'o-', label=launch_type)
        per_node_axes.plot(nodes, [1000 * p['ready_s_median'] / p['nodes'] for p in mine], 'o-',
                           label=launch_type)
        memory_axes.plot(nodes, [p['peak_uss_gib_median'] for p in mine], 'o-', label=launch_type)
    ready_axes.set(xlabel='nodes', ylabel='launch to ready (s)', title='Ready time')
    per_node_axes.set(xlabel='nodes', ylabel='launch to ready per node (ms)',
                      title='Ready time per node', xscale='log')
    memory_axes.set(xlabel='nodes', ylabel='peak USS of the process tree (GiB)',
                    title='Memory')
    for axes in (ready_axes, per_node_axes, memory_axes):
        axes.grid(True, alpha=0.3)
        axes.legend()
    figure.tight_layout()
    figure.savefig(target, dpi=100)


if __name__ == '__main__':
    main(*sys.argv[1:])
