"""Function calls per RPC at the caller, courier against the floor: a count load does not move.

    python -m bench.call_counts              # sync calls and 8 futures in flight, 2,000 each
    LP_COURIER_PURE=1 python -m bench.call_counts
    python -m bench.call_counts --relocate   # a client that follows its server (bench.run's)

CPU per call on a shared 2-core machine moves with whatever else runs; how many
functions the caller runs per call does not. ``sys.setprofile`` counts every
Python function and every C function called from Python on the calling thread
(and threads started meanwhile) while ``--calls`` calls are made, after a
warm-up. The server runs in its own process and is not counted (see
``bench.futures_profile`` for its CPU). ``--top`` lists the functions called at
least half a time per call.
"""

from __future__ import annotations

import argparse
import collections
import functools
import subprocess
import sys
import threading

from . import futures_profile, peers_floor, procs
from .harness import Budget


class Counter:
    """Counts function calls while active, by (file, function)."""

    def __init__(self):
        self.counts: collections.Counter = collections.Counter()

    def _profile(self, frame, event, arg) -> None:
        if event == 'call':
            code = frame.f_code
            self.counts[(code.co_filename.rsplit('/', 1)[-1], code.co_name)] += 1
        elif event == 'c_call':
            self.counts[('C', getattr(arg, '__qualname__', str(arg)))] += 1

    def per_call(self, work, calls: int) -> tuple[float, list[tuple[str, float]]]:
        """Runs ``work(calls)`` counting; total calls per call and the common ones."""
        self.counts.clear()
        sys.setprofile(self._profile)
        threading.setprofile(self._profile)
        try:
            done = work(calls)
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
        done = max(done, 1)
        common = [(f'{f}:{name}', n / done) for (f, name), n in self.counts.most_common()
                  if n / done >= 0.5]
        return sum(self.counts.values()) / done, common


def _courier(calls: int, counter: Counter, relocate: bool = False) -> dict:
    from launchpad_py import courier
    process = subprocess.Popen([sys.executable, '-c', futures_profile.SERVER],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                               env=procs.child_env())
    try:  # relocate: the client follows its server, as a node handle's (bench.run's) does.
        client = courier.Client(process.stdout.readline().strip(),
                                relocate=(lambda address: address) if relocate else None)
        futures = client.futures

        def sync(n):
            for _ in range(n):
                client.echo(1)
            return n

        def inflight(n):
            pending = collections.deque(futures.echo(1) for _ in range(8))
            for _ in range(n - 8):
                pending.popleft().result()
                pending.append(futures.echo(1))
            for future in pending:
                future.result()
            return n

        return _both(sync, inflight, calls, counter)
    finally:
        process.stdin.close()
        process.wait(30)


def _floor(calls: int, counter: Counter) -> dict:
    peer = peers_floor.FloorPeer('unix')
    peer.start()
    try:
        client = peer.client

        def sync(n):
            for _ in range(n):
                client.call('echo', 1)
            return n

        def inflight(n):
            return client.pipelined('echo', (1,), 8, Budget(n, 600))[0]

        return _both(sync, inflight, calls, counter)
    finally:
        peer.stop()


def _both(sync, inflight, calls: int, counter: Counter) -> dict:
    sync(200)
    inflight(200)
    return {'sync': counter.per_call(sync, calls), 'inflight8': counter.per_call(inflight, calls)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--calls', type=int, default=2000)
    ap.add_argument('--top', action='store_true', help='list the functions behind each count')
    ap.add_argument('--relocate', action='store_true',
                    help='a client that follows its server (as bench.run\'s node handles give)')
    args = ap.parse_args(argv)
    counter = Counter()
    from launchpad_py.courier import frame_loop
    ours = functools.partial(_courier, relocate=args.relocate)
    label = f'launchpad ({frame_loop.active()}{", relocate" if args.relocate else ""})'
    for name, measure in ((label, ours), ('floor_unix', _floor)):
        for row, (total, common) in measure(args.calls, counter).items():
            print(f'{name:22} {row:10} {total:6.1f} function calls per call at the caller')
            if args.top:
                for function, n in common:
                    print(f'    {n:5.2f}  {function}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
