"""Hand-overs of preempted readers on a busy machine: the watchdog with and without counts.

Run from the repository root::

    python -m bench.preempted_readers                      # 2 busy processes, 10 pairs
    python -m bench.preempted_readers --busy 1 --reps 12 --json bench/preempted_readers.json

The courier watchdog (``courier/transports/sockets/reader_handover.py``) replaces
the reader of a futures connection whose call runs over two ticks. On a loaded
machine that was often a reader preempted in the middle of a tiny call, and each
such hand-over starts a thread and sends the next calls through the pool. The
watchdog now reads the reader thread's scheduler counts and spares one that only
waited for a CPU. This runs two courier servers side by side: one as shipped, one
whose watchdog cannot read counts (the rule by ticks alone, as before), with
``--busy`` processes spinning beside them, and keeps 8 futures in flight at each
in turn. Per repetition: calls/s, CPU per call (this process and the server),
and hand-overs.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time

from .cpu import CpuMeter

_SERVER = '''
import os, sys
from launchpad_py import courier
from launchpad_py.courier.transports.sockets import reader_handover, socket_serving
if sys.argv[1] == 'ticks':  # No counts: every call over two ticks is handed over.
    reader_handover.scheduled_ns = lambda thread_id: None
handed = [0]
promote = socket_serving.SocketServing._promote
def counted(self, turn, token):
    handed[0] += 1
    promote(self, turn, token)
socket_serving.SocketServing._promote = counted
class Service:
    def ping(self):
        return None
    def handed_over(self):
        return handed[0]
    def pid(self):
        return os.getpid()
server = courier.Server(Service()).start()
print(server.address, flush=True)
sys.stdin.read()
'''


def _repetition(client, seconds: float) -> dict:
    meter = CpuMeter([client.pid()])
    handed, before = client.handed_over(), meter.snapshot()
    start, calls = time.perf_counter(), 0
    pending = collections.deque(client.futures.ping() for _ in range(8))
    while pending:
        pending.popleft().result()
        calls += 1
        if time.perf_counter() - start < seconds:
            pending.append(client.futures.ping())
    elapsed = time.perf_counter() - start
    cpu, switches = CpuMeter.per_call(before, meter.snapshot(), calls)
    return {'calls_per_s': calls / elapsed, 'cpu_us_per_call': cpu,
            'switches_per_call': switches, 'hand_overs': client.handed_over() - handed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--busy', type=int, default=2, help='spinning processes beside them')
    parser.add_argument('--reps', type=int, default=10)
    parser.add_argument('--seconds', type=float, default=1.0, help='per repetition')
    parser.add_argument('--json', help='write the results here')
    args = parser.parse_args()
    from launchpad_py import courier
    servers, clients = [], {}
    for rule in ('counts', 'ticks'):
        server = subprocess.Popen([sys.executable, '-c', _SERVER, rule], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        servers.append(server)
        clients[rule] = courier.Client(server.stdout.readline().strip())
        clients[rule].ping()
    busy = [subprocess.Popen([sys.executable, '-c', 'while True: pass'])
            for _ in range(args.busy)]
    results = {rule: [] for rule in clients}
    try:
        for _ in range(args.reps):
            for rule, client in clients.items():
                results[rule].append(_repetition(client, args.seconds))
    finally:
        for process in busy:
            process.kill()
        for server in servers:
            server.stdin.close()
            server.wait(timeout=30)
    for rule, reps in results.items():
        print(f'{rule:6s}', '  '.join(
            f'{key} {statistics.median(r[key] for r in reps):,.2f}' for key in reps[0]),
            '  hand-overs each:', [r['hand_overs'] for r in reps])
    if args.json:
        with open(args.json, 'w') as out:
            json.dump({'busy': args.busy, 'reps': args.reps, 'seconds': args.seconds,
                       'cpus': os.cpu_count(), 'loadavg_at_end': os.getloadavg(),
                       'results': results}, out, indent=1)


if __name__ == '__main__':
    main()
