"""What collecting node statistics costs a tiny call: this tree against itself without the counters.

Run from the repository root::

    python -m bench.observe_overhead --json bench/observe_overhead.json

The baseline is this commit with the counting lines of the call path cut out
(``STRIPPED``: the clock read that starts a call, the count, the reply's
bytes), checked out in a temporary git worktree; ``--baseline REF`` takes a
git ref as it is instead (e.g. the commit before ``courier/stats.py`` was
added, which predates other changes of the courier too).
One courier server process runs from each tree (``echo``, loopback, the
same-host socket path that ``tiny_sync`` of ``bench/run.py`` measures), and one
caller alternates blocks of ``echo(1)`` calls between them, so a burst of load
on this shared machine hits both sides alike. Two processes running the same
code still differ by a few percent (placement, memory layout), so this is
repeated with ``--pairs`` fresh pairs of processes. Reported: µs per call of
each side, the median over pairs of each pair's median per-block ratio (this
tree ÷ baseline), every pair's ratio, and the counters' own cost per call
timed alone (``hot_path_ns``). ``--baseline HEAD`` compares the code with
itself: the ratio then shows the method's own error.

A second, finer measure (``in_process``) runs the same server and caller in
this process and alternates blocks with the counters on and with them
replaced by no-ops (the clock read that starts a call included), timing each
block in CPU seconds of this process (server and caller both), which load from
other processes barely moves.

A third (``--instructions``, needs valgrind) counts the instructions each
side's server executes per call under callgrind (the thread that serves the
connection, from the difference between a run of ``--calls-low`` and one of
``--calls-high`` calls), and the caller's instructions per call likewise. Instruction
counts do not move with load at all; they leave out the kernel's share of a
call (its socket reads and writes, about half of a tiny call's CPU time here),
so the share they give is an upper bound of the share in time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs in each tree: serve echo until stdin closes; print the address first.
SERVER = r'''
import sys
import launchpad_py
from launchpad_py import courier
class Echo:
    def echo(self, x):
        return x
server = courier.Server(Echo(), thread_pool_size=4).start()
print(server.address, launchpad_py.__file__, flush=True)
sys.stdin.read()
server.stop()
'''


def _git(*args: str) -> str:
    return subprocess.run(['git', *args], cwd=REPO, check=True, capture_output=True,
                          text=True).stdout.strip()


#: (file, text, replacement): what the baseline tree lacks. The bench stops if a text is not
#: found, so a change to the counting code cannot leave a stale baseline behind.
STRIPPED = [
    ('launchpad_py/courier/server.py', '        start = _clock()\n', '        start = 0.0\n'),
    ('launchpad_py/courier/server.py',
     '            size = len(frame.pickled)\n            if frame.buffers:\n'
     '                size += stats.buffer_bytes(frame.buffers)\n'
     '            (shard or self.stats.shard()).count(frame.method, start, size, ok)\n', ''),
    ('launchpad_py/courier/transports/grpc_server.py',
     '        serving.stats.sent(len(reply))  # Counted before it leaves, like the other paths.\n',
     ''),
    ('launchpad_py/courier/transports/uds.py',
     '            if counts is not None:\n                counts.bytes_out += len(parts[0])\n', ''),
    ('launchpad_py/courier/transports/uds.py',
     '        if counts is not None:\n            counts.bytes_out += frames.encoded_size(parts)\n',
     ''),
    ('launchpad_py/courier/transports/tcp.py',
     '        if counts is not None:\n            counts.bytes_out += len(parts[0]) if len(parts) == 1 '
     'else frames.encoded_size(parts)\n', ''),
]


def strip_counters(tree: str) -> None:
    """Cuts the counting out of the call path of the checked-out ``tree`` (see ``STRIPPED``)."""
    for name, text, replacement in STRIPPED:
        path = os.path.join(tree, name)
        with open(path) as source:
            code = source.read()
        if text not in code:
            raise SystemExit(f'bench.observe_overhead: {name} no longer has {text!r}; '
                             'update STRIPPED to the counting code as it is now')
        with open(path, 'w') as source:
            source.write(code.replace(text, replacement))


def start_server(tree: str) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen([sys.executable, '-c', SERVER], cwd=tree, text=True,
                               env=dict(os.environ, PYTHONPATH=tree),
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    address, library = process.stdout.readline().split()
    if not os.path.realpath(library).startswith(os.path.realpath(tree)):
        raise SystemExit(f'{tree}: launchpad_py came from {library}, not the tree')
    return process, address


def block_us(client, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        client.echo(1)
    return (time.perf_counter() - start) / calls * 1e6


def hot_path_ns(calls: int = 200_000) -> float:
    """Nanoseconds the counters add to one call, measured alone (clock, record, reply size)."""
    from launchpad_py.courier import stats
    counters = stats.ServerStats('bench')
    clock = time.perf_counter
    start = clock()
    for _ in range(calls):
        counters.record('echo', clock(), 27, True)
        counters.sent(61)
    return (clock() - start) / calls * 1e9


def in_process(blocks: int, calls: int) -> dict:
    """CPU µs per call with the counters on and off (no-ops), same server, alternating blocks."""
    from launchpad_py import courier
    from launchpad_py.courier import server as server_module
    from launchpad_py.courier import stats

    class Echo:
        def echo(self, x):
            return x

    # Off: the start clock read becomes float() (≈ its call cost), record and sent no-ops.
    real = (server_module._clock, stats.ServerStats.record, stats.ServerStats.sent)
    off = (float, lambda self, *args: None, lambda self, nbytes: None)
    per_block: dict[str, list[float]] = {'off': [], 'on': []}
    server = courier.Server(Echo()).start()
    try:
        client = courier.Client(server.address)
        block_us(client, calls)
        for number in range(2 * blocks):
            name = ('on', 'off')[(number + number // 2) % 2]  # on off off on on off ...
            server_module._clock, stats.ServerStats.record, stats.ServerStats.sent = (
                real if name == 'on' else off)
            start = time.process_time()
            for _ in range(calls):
                client.echo(1)
            per_block[name].append((time.process_time() - start) / calls * 1e6)
    finally:
        server_module._clock, stats.ServerStats.record, stats.ServerStats.sent = real
        server.stop()
    ratios = [a / b for a, b in zip(per_block['on'], per_block['off'])]
    return {'on_cpu_us': statistics.median(per_block['on']),
            'off_cpu_us': statistics.median(per_block['off']),
            'ratio_median': statistics.median(ratios),
            'ratio_quartiles': statistics.quantiles(ratios, n=4)}


def measure(base_tree: str, blocks: int, calls: int) -> dict:
    from launchpad_py import courier
    servers = {name: start_server(tree) for name, tree in (('baseline', base_tree),
                                                          ('current', REPO))}
    try:
        clients = {name: courier.Client(address) for name, (_, address) in servers.items()}
        for client in clients.values():  # Warm-up: connections, caches, frequency.
            block_us(client, calls)
        per_block = {'baseline': [], 'current': []}
        for number in range(blocks):
            order = ['baseline', 'current'] if number % 2 == 0 else ['current', 'baseline']
            for name in order:
                per_block[name].append(block_us(clients[name], calls))
    finally:
        for process, _ in servers.values():
            process.stdin.close()
            process.wait(30)
    return per_block


def _callgrind(argv: list[str], tree: str) -> subprocess.Popen:
    """``argv`` under callgrind, counting each thread on its own."""
    out = os.path.join(tempfile.mkdtemp(prefix='lp-callgrind-'), 'out')
    process = subprocess.Popen(
        ['valgrind', '--tool=callgrind', '--separate-threads=yes', f'--callgrind-out-file={out}',
         *argv], cwd=tree, env=dict(os.environ, PYTHONPATH=tree), text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    process.output_file = out
    return process


def _thread_instructions(process: subprocess.Popen) -> list[int]:
    """Instructions each thread of an ended callgrind run executed, the main thread first."""
    process.wait(600)
    directory = os.path.dirname(process.output_file)
    counts = []
    for name in sorted(os.listdir(directory)):  # out-01 (the main thread), out-02, ...
        if '-' not in name:
            continue  # An empty file callgrind leaves under the plain name.
        with open(os.path.join(directory, name)) as data:
            counts.append(next(int(line.split()[1]) for line in data
                               if line.startswith(('summary:', 'totals:'))))
    shutil.rmtree(directory)
    return counts


def server_instructions(tree: str, calls: int) -> int:
    """Instructions that the thread serving a connection of ``tree``'s server ran for ``calls``.

    A synchronous connection's calls all run on its reader thread (see
    ``uds_server``), so that thread's count is the server's work per call, free
    of whatever the process's other threads (gRPC's pollers) do meanwhile.
    """
    from launchpad_py import courier
    process = _callgrind([sys.executable, '-c', SERVER], tree)
    address = process.stdout.readline().split()[0]
    client = courier.Client(address)
    for _ in range(calls):
        client.echo(1)
    process.stdin.close()
    return max(_thread_instructions(process)[1:])


def client_instructions(calls: int) -> int:
    """Instructions of the main thread of a process of this tree that made ``calls`` calls."""
    server, address = start_server(REPO)
    caller = ('import sys\nfrom launchpad_py import courier\n'
              f'client = courier.Client({address!r})\n'
              f'for _ in range({calls}):\n    client.echo(1)\n')
    try:
        return _thread_instructions(_callgrind([sys.executable, '-c', caller], REPO))[0]
    finally:
        server.stdin.close()
        server.wait(30)


def cpu_split(calls: int) -> dict:
    """User and kernel CPU µs per tiny call, server and caller together (this tree)."""
    import psutil
    from launchpad_py import courier
    server, address = start_server(REPO)
    try:
        client = courier.Client(address)
        block_us(client, calls // 10)
        serving = psutil.Process(server.pid)
        server_before, caller_before = serving.cpu_times(), os.times()
        block_us(client, calls)
        server_after, caller_after = serving.cpu_times(), os.times()
    finally:
        server.stdin.close()
        server.wait(30)
    user = (server_after.user - server_before.user) + (caller_after.user - caller_before.user)
    kernel = ((server_after.system - server_before.system)
              + (caller_after.system - caller_before.system))
    return {'user_us': user / calls * 1e6, 'kernel_us': kernel / calls * 1e6}


def instructions(base_tree: str, low: int, high: int) -> dict:
    """Instructions per tiny call: each tree's server, and the caller; see the module docstring."""
    def per_call(count) -> float:  # The difference of two runs: start-up cancels out.
        return (count(high) - count(low)) / (high - low)

    baseline = per_call(lambda n: server_instructions(base_tree, n))
    current = per_call(lambda n: server_instructions(REPO, n))
    caller = per_call(client_instructions)
    split = cpu_split(20_000)
    share = (current - baseline) / (baseline + caller)
    return {'server_baseline': baseline, 'server_current': current, 'caller': caller,
            'calls_low': low, 'calls_high': high, 'share': share, **split,
            'share_of_cpu': share * split['user_us'] / (split['user_us'] + split['kernel_us'])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--baseline', help='a git ref to compare with as it is (default: this '
                        'commit with the counters cut out)')
    parser.add_argument('--pairs', type=int, default=8, help='fresh pairs of server processes')
    parser.add_argument('--blocks', type=int, default=60, help='blocks per side and pair')
    parser.add_argument('--calls', type=int, default=400, help='calls per block')
    parser.add_argument('--in-process-blocks', type=int, default=400,
                        help='blocks per side of the in-process measure')
    parser.add_argument('--instructions', action='store_true',
                        help='also count instructions per call under callgrind (needs valgrind)')
    parser.add_argument('--calls-low', type=int, default=2000)
    parser.add_argument('--calls-high', type=int, default=12000)
    parser.add_argument('--json', help='write the results here')
    args = parser.parse_args()
    commit = _git('rev-parse', args.baseline or 'HEAD')
    with tempfile.TemporaryDirectory(prefix='lp-baseline-') as tmp:
        base_tree = os.path.join(tmp, 'tree')
        _git('worktree', 'add', '--detach', base_tree, commit)
        if args.baseline is None:
            strip_counters(base_tree)
        try:
            pairs = [measure(base_tree, args.blocks, args.calls) for _ in range(args.pairs)]
            counted = (instructions(base_tree, args.calls_low, args.calls_high)
                       if args.instructions else None)
        finally:
            _git('worktree', 'remove', '--force', base_tree)
    pair_ratios = [statistics.median(c / b for c, b in zip(p['current'], p['baseline']))
                   for p in pairs]
    report = {
        'baseline_ref': args.baseline or 'HEAD without the counters (STRIPPED)',
        'baseline_commit': commit,
        'current_commit': _git('rev-parse', 'HEAD'),
        'pairs': args.pairs, 'blocks': args.blocks, 'calls_per_block': args.calls,
        'baseline_us': statistics.median(v for p in pairs for v in p['baseline']),
        'current_us': statistics.median(v for p in pairs for v in p['current']),
        'ratio_median': statistics.median(pair_ratios),
        'pair_ratios': pair_ratios,
        'hot_path_ns': min(hot_path_ns() for _ in range(3)),
        'load_average': os.getloadavg(),
        'cpus': os.cpu_count(),
    }
    report['hot_path_share'] = report['hot_path_ns'] / 1e3 / report['current_us']
    report['in_process'] = in_process(args.in_process_blocks, args.calls)
    print(f'tiny call: baseline {report["baseline_us"]:.1f} µs, with statistics '
          f'{report["current_us"]:.1f} µs; ratio {report["ratio_median"]:.3f} (median of '
          f'{args.pairs} pairs: {", ".join(f"{r:.3f}" for r in sorted(pair_ratios))}); the '
          f'counters alone {report["hot_path_ns"]:.0f} ns = '
          f'{report["hot_path_share"]:.2%} of a call')
    inside = report['in_process']
    print(f'in one process, CPU per call: counters on {inside["on_cpu_us"]:.2f} µs, off '
          f'{inside["off_cpu_us"]:.2f} µs; ratio {inside["ratio_median"]:.4f} (quartiles '
          f'{inside["ratio_quartiles"][0]:.3f}–{inside["ratio_quartiles"][2]:.3f})')
    if counted is not None:
        report['instructions'] = counted
        print(f'instructions per call: server {counted["server_baseline"]:.0f} without '
              f'statistics, {counted["server_current"]:.0f} with; caller '
              f'{counted["caller"]:.0f}; the statistics are {counted["share"]:.2%} of a '
              f'call\'s instructions; user time is {counted["user_us"]:.1f} of '
              f'{counted["user_us"] + counted["kernel_us"]:.1f} CPU µs per call, so about '
              f'{counted["share_of_cpu"]:.2%} of its CPU')
    if args.json:
        with open(args.json, 'w') as out:
            json.dump(dict(report, per_block=pairs), out, indent=1)


if __name__ == '__main__':
    main()
