"""Calls per node in the launching process while a program launches: a count load does not move.

    python -m bench.launch_calls --nodes 100,400 --json bench/launch_calls.json

Whether launch cost is flat per node cannot be read from ready times on a shared
2-core machine (the load moves them more than the node count does), but work that
is O(N) per node shows as functions whose calls per node grow with N. For each
launch type and node count, ``sys.setprofile`` (and ``threading.setprofile`` for
the supervisor, channel and node threads) counts every launchpad_py function
called in the launching process from ``lp.launch`` until it returns (every server
listening), on issue 25's fan-out program. A ``local_mp`` node's own process is
not counted: what it does does not depend on how many others there are.

The JSON keeps, per launch type, the calls per node at each N and the functions
whose calls per node grow by more than a third from the smallest N to the largest.
A loop inside one call (a scan over all workers) is not seen here; ``supervisor._Prefix``
and the address book's sets are how those are kept O(1) a node.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import threading

import launchpad_py as lp
from bench import scale_nodes


def count_one(launch_type: str, nodes: int) -> dict[str, int]:
    """Calls of each launchpad_py function during one launch, until ready."""
    counts: collections.Counter = collections.Counter()
    counting = [True]

    def profile(frame, event, arg):
        if event == 'call' and counting[0] and 'launchpad_py' in frame.f_code.co_filename:
            where = frame.f_code.co_filename.split('launchpad_py/')[-1]
            counts[f'{where}:{frame.f_code.co_name}'] += 1

    result = os.path.join(tempfile.mkdtemp(), 'fan_out.json')
    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        controller = lp.launch(scale_nodes.fan_out(nodes, result), launch_type=launch_type)
    finally:
        counting[0] = False
        sys.setprofile(None)
        threading.setprofile(None)
    controller.wait(timeout=900)
    return dict(counts)


def growing(small: dict[str, int], n_small: int, large: dict[str, int],
            n_large: int) -> list[dict]:
    """Functions whose calls per node grow by more than a third from ``n_small`` to ``n_large``."""
    rows = []
    for name in set(small) | set(large):
        before, after = small.get(name, 0) / n_small, large.get(name, 0) / n_large
        if after > 4 / 3 * before + 0.05 and large.get(name, 0) > 50:
            rows.append({'function': name, 'per_node': [round(before, 2), round(after, 2)]})
    return sorted(rows, key=lambda row: -row['per_node'][1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--nodes', default='100,400')
    parser.add_argument('--launch_types', default='local_mt,local_mp')
    parser.add_argument('--one', help=argparse.SUPPRESS)  # 'launch_type,nodes', in a child.
    parser.add_argument('--json')
    args = parser.parse_args()
    if args.one:
        launch_type, nodes = args.one.split(',')
        print(json.dumps(count_one(launch_type, int(nodes))))
        return
    sizes = [int(n) for n in args.nodes.split(',')]
    out = {'command': ' '.join(sys.argv), 'launch_types': {}}
    for launch_type in args.launch_types.split(','):
        per_size = {}
        for nodes in sizes:  # Each launch from a process of its own, counted from nothing.
            done = subprocess.run([sys.executable, '-m', 'bench.launch_calls', '--one',
                                   f'{launch_type},{nodes}'], capture_output=True, text=True,
                                  timeout=1200, check=True)
            per_size[nodes] = json.loads(done.stdout.strip().splitlines()[-1])
        row = {'calls_per_node': {n: round(sum(c.values()) / n, 1) for n, c in per_size.items()},
               'growing': growing(per_size[sizes[0]], sizes[0], per_size[sizes[-1]], sizes[-1])}
        out['launch_types'][launch_type] = row
        print(launch_type, json.dumps(row), flush=True)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(out, f, indent=1)


if __name__ == '__main__':
    main()
