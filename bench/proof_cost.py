"""What proofs bound to one server cost a tiny call: this tree against the tree before them.

Run from the repository root::

    python -m bench.proof_cost --json bench/proof_cost.json

The baseline (``--baseline REF``, default the commit before issue 23's
change) is unpacked from git into a temporary directory. For each tree and
each path (``uds``: the same-host socket, what ``tiny_sync`` of
``bench/run.py`` measures; ``tcp``: raw TCP, one handshake per connection;
``grpc``: a token per call, now also the SHA-256 of the body, checked by
the server, and a proof back), one caller process starts one server process
of the same tree (secret set, loopback) and runs a block of ``echo(1)``
calls for about ``--seconds`` when told. The driver alternates blocks
between the two trees, so a burst of load on this shared machine hits both
alike, and repeats with ``--pairs`` fresh pairs of processes. Reported per tree and path: wall µs per call and
CPU µs per call (caller and server processes together), and the median of
the per-block ratios (this tree ÷ baseline). Two processes of the same code
differ by a few percent here (placement, load), so the CPU the new gRPC
proofs add is also timed alone, in this process
(``grpc_proofs_alone_cpu_us_per_call``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile

BASELINE = '598b7b8'  # The last commit before per-server proofs (issue 23).
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CALLER = r'''
import os, subprocess, sys, time
import psutil
from launchpad_py import courier
secret = bytes(range(32))
server = subprocess.Popen([sys.executable, '-c', """
import sys
from launchpad_py import courier
class Echo:
    def echo(self, value):
        return value
server = courier.Server(Echo(), secret=bytes(range(32))).start()
print(server.address, flush=True)
sys.stdin.read()
server.stop()
"""], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
address = server.stdout.readline().strip()
transport = {'uds': 'auto', 'tcp': 'tcp', 'grpc': 'grpc'}[sys.argv[1]]
client = courier.Client(address, secret=secret, transport=transport, timeout=30)
for _ in range(200):
    client.echo(1)
served = psutil.Process(server.pid)
me = psutil.Process()
print('ready', flush=True)
for line in sys.stdin:
    seconds, calls = float(line), 0
    cpu = sum(me.cpu_times()[:2]) + sum(served.cpu_times()[:2])
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(50):
            client.echo(1)
        calls += 50
    wall = time.perf_counter() - start
    cpu = sum(me.cpu_times()[:2]) + sum(served.cpu_times()[:2]) - cpu
    print(calls, wall, cpu, flush=True)
server.stdin.close()
server.wait()
'''


def unpack(ref: str, into: str) -> str:
    """The tree of ``ref`` as files under ``into``."""
    archive = os.path.join(into, 'tree.tar')
    with open(archive, 'wb') as out:
        subprocess.run(['git', 'archive', ref], cwd=REPO, stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(os.path.join(into, 'tree'), filter='data')
    return os.path.join(into, 'tree')


class Caller:
    """One caller process (and its server) of one tree and path."""

    def __init__(self, tree: str, path: str):
        self.process = subprocess.Popen(
            [sys.executable, '-c', CALLER, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, cwd=tree, env={**os.environ, 'PYTHONPATH': tree})
        if self.process.stdout.readline().strip() != 'ready':
            raise RuntimeError(f'the {path} caller of {tree} did not start')

    def block(self, seconds: float) -> tuple[float, float]:
        """(wall µs, CPU µs) per call over calls made for about ``seconds``.

        CPU times tick in 10 ms steps, so a block must last long enough (0.5 s:
        a 2 % step) for its CPU per call to mean anything.
        """
        self.process.stdin.write(f'{seconds}\n')
        self.process.stdin.flush()
        calls, wall, cpu = map(float, self.process.stdout.readline().split())
        return wall / calls * 1e6, cpu / calls * 1e6

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def compare(trees: dict[str, str], path: str, pairs: int, blocks: int, seconds: float) -> dict:
    samples = {name: {'wall': [], 'cpu': []} for name in trees}
    ratios = {'wall': [], 'cpu': []}
    for pair in range(pairs):
        callers = {name: Caller(tree, path) for name, tree in trees.items()}
        try:
            for block in range(blocks):
                order = list(callers) if (pair + block) % 2 == 0 else list(callers)[::-1]
                got = {name: callers[name].block(seconds) for name in order}
                for name, (wall, cpu) in got.items():
                    samples[name]['wall'].append(wall)
                    samples[name]['cpu'].append(cpu)
                ratios['wall'].append(got['this'][0] / got['baseline'][0])
                ratios['cpu'].append(got['this'][1] / got['baseline'][1])
        finally:
            for caller in callers.values():
                caller.close()
    report = {name: {f'{kind}_us_per_call': round(statistics.median(values), 2)
                     for kind, values in by_kind.items()} for name, by_kind in samples.items()}
    report['ratio'] = {kind: round(statistics.median(values), 3) for kind, values in ratios.items()}
    return report


def proof_us(calls: int = 20000) -> float:
    """CPU µs of one gRPC call's proofs alone, both ends: the token (with the body's hash),
    the server's check of both, and its proof back; timed in this process, which load
    from other processes barely moves."""
    import time
    from launchpad_py.courier import auth, frames, messages
    from launchpad_py.courier.transports import grpc_tokens
    identity = auth.Identity.fresh(bytes(range(32)), 'echo/0')
    checker = grpc_tokens.TokenChecker(identity)
    body = b''.join(frames.encode(0, frames.REQUEST, ('echo', (1,), {}))[0])
    start = time.process_time()
    for _ in range(calls):
        metadata, expected = grpc_tokens.grpc_token(identity, messages.CALL,
                                                    grpc_tokens.digest((body,)))
        _, body_digest, proof = checker.check(messages.CALL, metadata)
        assert grpc_tokens.digest((body,)) == body_digest and proof == expected
    return round((time.process_time() - start) / calls * 1e6, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--baseline', default=BASELINE)
    parser.add_argument('--paths', default='uds,tcp,grpc')
    parser.add_argument('--pairs', type=int, default=3)
    parser.add_argument('--blocks', type=int, default=10)
    parser.add_argument('--seconds', type=float, default=0.5, help='length of one block')
    parser.add_argument('--json')
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix='lp-proof-bench-') as scratch:
        trees = {'this': REPO, 'baseline': unpack(args.baseline, scratch)}
        results = {path: compare(trees, path, args.pairs, args.blocks, args.seconds)
                   for path in args.paths.split(',')}
    results['grpc_proofs_alone_cpu_us_per_call'] = proof_us()
    results['settings'] = {'baseline': args.baseline, 'pairs': args.pairs,
                           'blocks': args.blocks, 'seconds_per_block': args.seconds,
                           'cpus': os.cpu_count()}
    text = json.dumps(results, indent=1)
    print(text)
    if args.json:
        with open(args.json, 'w') as out:
            out.write(text + '\n')


if __name__ == '__main__':
    main()
