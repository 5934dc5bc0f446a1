"""What collecting node statistics costs a tiny call: this tree against the code before it.

Run from the repository root::

    python -m bench.observe_overhead --json bench/observe_overhead.json

The baseline is the commit before ``launchpad_py/courier/stats.py`` was added
(``--baseline REF`` picks another), checked out in a temporary git worktree.
Each round runs the same ``tiny_sync`` measure (one caller, a ``local_mp``
courier node, ``echo(1)``; see ``bench/run.py``) once in a fresh process per
tree, alternating which goes first; both trees' ``bench/`` code runs, so only
the library differs. Reported: the median µs/call per tree, the median of the
per-round ratios (this tree ÷ baseline), the ratio of the fastest repetitions
of each tree (load only adds time, so these are the cleanest), every round,
and the counters' own
cost per call timed alone (``hot_path_ns``), the part of the difference that
is not noise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs inside each tree; its bench/ helpers exist in both.
CHILD = r'''
import json, sys
import launchpad_py
from bench.harness import Budget, measure, per_call_us
from bench.peers_launchpad import LaunchpadPeer
peer = LaunchpadPeer('auto')
peer.start()
try:
    values = measure(per_call_us(lambda: peer.call('echo', 1), Budget(max_calls=200_000,
                     max_seconds=float(sys.argv[2]))), reps=int(sys.argv[1]), warmup=1)
finally:
    peer.stop()
print(json.dumps({'library': launchpad_py.__file__, 'us_per_call': values}))
'''


def _git(*args: str) -> str:
    return subprocess.run(['git', *args], cwd=REPO, check=True, capture_output=True,
                          text=True).stdout.strip()


def default_baseline() -> str:
    added = _git('log', '--diff-filter=A', '--format=%H', '--', 'launchpad_py/courier/stats.py')
    if not added:
        raise SystemExit('cannot find the commit that added launchpad_py/courier/stats.py; '
                         'pass --baseline REF')
    return added.splitlines()[-1] + '~1'


def run_tree(tree: str, reps: int, seconds: float) -> list[float]:
    env = dict(os.environ, PYTHONPATH=tree)
    done = subprocess.run([sys.executable, '-c', CHILD, str(reps), str(seconds)], cwd=tree,
                          env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f'benchmark in {tree} failed:\n{done.stderr[-3000:]}')
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if not os.path.realpath(result['library']).startswith(os.path.realpath(tree)):
        raise SystemExit(f'{tree}: launchpad_py came from {result["library"]}, not the tree')
    return result['us_per_call']


def hot_path_ns(calls: int = 200_000) -> float:
    """Nanoseconds the counters add to one call, measured alone (begin, end, reply size)."""
    import time

    from launchpad_py.courier import stats
    counters = stats.ServerStats('bench')
    start = time.perf_counter()
    for _ in range(calls):
        shard = counters.begin()
        counters.end(shard, 'echo', 27, True)
        counters.sent(61)
    return (time.perf_counter() - start) / calls * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--baseline', help='git ref of the code without statistics')
    parser.add_argument('--rounds', type=int, default=8)
    parser.add_argument('--reps', type=int, default=5, help='repetitions per round and tree')
    parser.add_argument('--seconds', type=float, default=0.5, help='length of one repetition')
    parser.add_argument('--json', help='write the results here')
    args = parser.parse_args()
    baseline = args.baseline or default_baseline()
    commit = _git('rev-parse', baseline)
    with tempfile.TemporaryDirectory(prefix='lp-baseline-') as tmp:
        base_tree = os.path.join(tmp, 'tree')
        _git('worktree', 'add', '--detach', base_tree, commit)
        try:
            rounds = []
            for number in range(args.rounds):
                order = [('baseline', base_tree), ('current', REPO)]
                if number % 2:
                    order.reverse()
                values = {name: run_tree(tree, args.reps, args.seconds) for name, tree in order}
                rounds.append(values)
                base, current = (statistics.median(values[k]) for k in ('baseline', 'current'))
                print(f'round {number}: baseline {base:.1f} µs, current {current:.1f} µs, '
                      f'ratio {current / base:.3f}', flush=True)
        finally:
            _git('worktree', 'remove', '--force', base_tree)
    median = {k: [statistics.median(r[k]) for r in rounds] for k in ('baseline', 'current')}
    best = {k: min(v for r in rounds for v in r[k]) for k in ('baseline', 'current')}
    report = {
        'baseline_commit': commit,
        'current_commit': _git('rev-parse', 'HEAD'),
        'baseline_us': statistics.median(median['baseline']),
        'current_us': statistics.median(median['current']),
        'ratio_median': statistics.median(c / b for c, b in zip(median['current'],
                                                                median['baseline'])),
        # Load on the machine only ever adds time: the fastest repetitions are the cleanest.
        'baseline_best_us': best['baseline'],
        'current_best_us': best['current'],
        'ratio_best': best['current'] / best['baseline'],
        'load_average': os.getloadavg(),
        'rounds': rounds,
        'cpus': os.cpu_count(),
        'hot_path_ns': hot_path_ns(),
    }
    print(f'tiny_sync: baseline {report["baseline_us"]:.1f} µs, current '
          f'{report["current_us"]:.1f} µs; median ratio {report["ratio_median"]:.3f}; best '
          f'{report["baseline_best_us"]:.1f} vs {report["current_best_us"]:.1f} µs, ratio '
          f'{report["ratio_best"]:.3f}; the counters alone: {report["hot_path_ns"]:.0f} ns per '
          f'call ({report["hot_path_ns"] / 1e3 / report["current_best_us"]:.2%} of the best call)')
    if args.json:
        with open(args.json, 'w') as out:
            json.dump(report, out, indent=1)


if __name__ == '__main__':
    main()
