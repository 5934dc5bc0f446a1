"""Python function calls per call on a courier server's futures path (8 in flight), counted.

Run from the repository root::

    python -m bench.futures_server_counts            # 20,000 calls, the top 40 functions
    LP_COURIER_PURE=1 python -m bench.futures_server_counts

``bench.server_counts`` counts the server under fan-in (synchronous calls); this counts
the path ``bench.run``'s ``inflight8`` row takes: one caller process keeps 8 futures in
flight on one connection, and a profile hook on the server's serving threads (this
process) counts every Python and C function they call, per call. A count, which load on
the machine does not move.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import threading

from launchpad_py import courier

CALLER = r'''
import collections, sys
from launchpad_py import courier
client = courier.Client(sys.argv[1])
calls = int(sys.argv[2])
for n in (2000, None):  # A warm-up, then the counted calls once the server says so.
    if n is None:
        print('warm', flush=True)
        sys.stdin.readline()
        n = calls
    futures = collections.deque(client.futures.echo(1) for _ in range(8))
    for _ in range(n - 8):
        futures.popleft().result()
        futures.append(client.futures.echo(1))
    for future in futures:
        future.result()
print('done', flush=True)
'''


class Echo:
    def echo(self, x):
        return x


def count(calls: int) -> collections.Counter:
    """Function calls on the server's threads while the caller makes ``calls`` calls."""
    counts: collections.Counter = collections.Counter()
    counting = threading.Event()

    def hook(frame, event, arg):
        if not counting.is_set() or not threading.current_thread().name.startswith('courier'):
            return
        if event == 'call':
            counts[f'{frame.f_code.co_filename.rsplit("/", 1)[-1]}:{frame.f_code.co_name}'] += 1
        elif event == 'c_call':
            counts['C:' + getattr(arg, '__qualname__', str(arg))] += 1

    threading.setprofile(lambda *_: sys.setprofile(hook))
    server = courier.Server(Echo(), thread_pool_size=16).start()
    caller = subprocess.Popen([sys.executable, '-c', CALLER, server.address, str(calls)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert caller.stdout.readline().strip() == 'warm', 'the caller failed'
        counting.set()  # Counted from here: the warm-up's calls are done.
        caller.stdin.write('\n')
        caller.stdin.flush()
        assert caller.stdout.readline().strip() == 'done', 'the caller failed'
        counting.clear()
    finally:
        caller.stdin.close()
        caller.wait(timeout=60)
        server.stop()
        threading.setprofile(None)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--calls', type=int, default=20000)
    parser.add_argument('--top', type=int, default=40)
    args = parser.parse_args()
    counts = count(args.calls)
    print(f'{sum(counts.values()) / args.calls:.1f} function calls per call on the server')
    for name, n in counts.most_common(args.top):
        print(f'{n / args.calls:8.2f}  {name}')


if __name__ == '__main__':
    main()
