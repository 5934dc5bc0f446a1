"""Where pipelined futures spend their time: CPU and context switches per call, per thread.

Run from the repository root::

    python -m bench.futures_profile                        # depth 8 and 64, floor and courier
    python -m bench.futures_profile --depth 8 --peers launchpad --calls 50000
    python -m bench.futures_profile --depth 0              # synchronous calls, one at a time
    python -m bench.futures_profile --depth '' --fanin 4,16  # caller processes into one server

Each peer's server runs in its own process (the floor's ``peers_floor``, or a
courier ``Server`` of ``echo``); this process keeps ``--depth`` calls in flight
(oldest first, as ``bench.run``'s ``inflight`` rows do; depth 0 makes
synchronous calls, as ``tiny_sync`` does) and reads, before and
after, every thread's user and kernel CPU time and its voluntary and forced
context switches from ``/proc/<pid>/task``. The output is per thread role, per
call: what each side's threads cost, and how often they hand the CPU over.
A thread's CPU time is the scheduler's exact count (``schedstat``), split into
user and kernel time in the proportion of its clock-tick samples (``stat``,
10 ms ticks, so that split is rough on short runs); it barely moves with other
load on the machine, unlike calls/s.
``--fanin`` instead runs that many caller processes of synchronous calls (as
``bench.run``'s ``fanin`` rows do) and reports the server process's CPU per
call (its connection threads come and go with the callers, so per process).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

from . import peer as peer_module, peers_floor, procs
from .harness import Budget

_TICK = os.sysconf('SC_CLK_TCK')

class Echo:
    """``echo``, and the names of the serving process's threads (by native id)."""

    def echo(self, x):
        return x

    def ping(self):
        return None

    def threads(self):
        return {t.native_id: t.name for t in threading.enumerate()}


# A courier server of ``Echo`` in a process of its own.
SERVER = r'''
import sys
from launchpad_py import courier
from bench.futures_profile import Echo
server = courier.Server(Echo(), thread_pool_size=16).start()
print(server.address, flush=True)
sys.stdin.read()
server.stop()
'''


def thread_counters(pid: int) -> dict[int, tuple[float, float, int, int]]:
    """Per thread id: (user s, kernel s, voluntary, forced context switches).

    CPU seconds are exact (``schedstat``), split by the thread's tick samples."""
    counters = {}
    for tid in os.listdir(f'/proc/{pid}/task'):
        try:
            with open(f'/proc/{pid}/task/{tid}/stat') as stat:
                fields = stat.read().rsplit(')', 1)[1].split()
            with open(f'/proc/{pid}/task/{tid}/schedstat') as schedstat:
                exact = int(schedstat.read().split()[0]) / 1e9
            with open(f'/proc/{pid}/task/{tid}/status') as status:
                switches = dict(line.split(':') for line in status if 'ctxt_switches' in line)
        except OSError:
            continue  # The thread ended meanwhile.
        user, kernel = int(fields[11]), int(fields[12])
        user_share = user / (user + kernel) if user + kernel else 1.0
        counters[int(tid)] = (exact * user_share, exact * (1 - user_share),
                              int(switches['voluntary_ctxt_switches']),
                              int(switches['nonvoluntary_ctxt_switches']))
    return counters


def role(name: str) -> str:
    """A thread's name without its serial number: the threads of one role add up."""
    return re.sub(r'[_-]?\d+$', '', name) or name


def per_role(before: dict, after: dict, names: dict[int, str], calls: int) -> dict:
    """Per role: user µs, kernel µs, voluntary and forced switches, each per call."""
    totals: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0, 0])
    for tid, end in after.items():
        start = before.get(tid, (0.0, 0.0, 0, 0))
        delta = [b - a for a, b in zip(start, end)]
        if not any(delta):
            continue
        entry = totals[role(names.get(tid, 'other'))]
        for index, value in enumerate(delta):
            entry[index] += value
    return {name: {'user_us': user / calls * 1e6, 'kernel_us': kernel / calls * 1e6,
                   'voluntary': voluntary / calls, 'forced': forced / calls}
            for name, (user, kernel, voluntary, forced) in sorted(totals.items())}


def own_names() -> dict[int, str]:
    return {t.native_id: t.name for t in threading.enumerate()}


def profile(server_pid: int, server_names, run, depth: int, calls: int) -> dict:
    """Runs ``run(depth, calls)`` and reports both processes' threads per call."""
    run(depth, min(calls, 2000))  # Warm-up: connections, caches, threads started.
    server_before, client_before = thread_counters(server_pid), thread_counters(os.getpid())
    server_total = process_cpu(server_pid)
    start = time.perf_counter()
    done = run(depth, calls)
    elapsed = time.perf_counter() - start
    server_after, client_after = thread_counters(server_pid), thread_counters(os.getpid())
    server_total = sum(process_cpu(server_pid)) - sum(server_total)
    return {'calls_per_s': done / elapsed, 'calls': done,
            'server': per_role(server_before, server_after, server_names(), done),
            'client': per_role(client_before, client_after, own_names(), done),
            # In ticks, but with the threads that ended during the run (a reader handed over).
            'server_process_us': server_total / done * 1e6}


def floor(depth: int, calls: int) -> dict:
    path = os.path.join(tempfile.mkdtemp(prefix='lp_bench_'), 'sock')
    server = procs.start_server('peers_floor', [f'unix:{path}'])
    client = peers_floor.FloorClient(server.address)
    try:
        def run(d, n):
            if not d:
                for _ in range(n):
                    client.call('echo', 1)
                return n
            return client.pipelined('echo', (1,), d, Budget(n, 600))[0]

        def names():
            return {tid: 'main' if tid == server.pid else 'connection'
                    for tid in thread_counters(server.pid)}

        return profile(server.pid, names, run, depth, calls)
    finally:
        client.close()
        server.stop()
        os.unlink(path)
        os.rmdir(os.path.dirname(path))


def courier_peer(transport: str):
    def measure(depth: int, calls: int) -> dict:
        from launchpad_py import courier
        # A session of its own, as procs gives the floor's server (same autogroup placement).
        process = subprocess.Popen([sys.executable, '-c', SERVER], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True, env=procs.child_env(),
                                   start_new_session=True)
        try:
            client = courier.Client(process.stdout.readline().strip(), transport=transport)
            return profile(process.pid, client.threads, _futures_loop(client), depth, calls)
        finally:
            process.stdin.close()
            process.wait(30)
    return measure


def launched_peer(depth: int, calls: int) -> dict:
    """As ``launchpad``, but the server is a node this process launched (``local_mp``).

    ``bench.run``'s launchpad rows are measured this way: the launcher's threads
    (supervision, heartbeats, status) then share the caller's process and its GIL,
    which a courier ``Server`` started by hand does not show."""
    import contextlib
    import io

    import launchpad_py as lp
    program = lp.Program('futures_profile')
    handle = program.add_node(lp.CourierNode(Echo, courier_kwargs={'thread_pool_size': 16}),
                              label='echo')
    with contextlib.redirect_stdout(io.StringIO()):
        controller = lp.launch(program, launch_type='local_mp', terminal='output_to_files')
    try:
        client = handle.dereference()
        client.ping()
        pid = next(s.pid for s in controller.statuses() if s.label == 'echo')
        return profile(pid, client.threads, _futures_loop(client), depth, calls)
    finally:
        controller.stop()


def _futures_loop(client):
    def run(d, n):
        if not d:
            for _ in range(n):
                client.echo(1)
            return n
        futures = client.futures
        pending = collections.deque(futures.echo(1) for _ in range(d))
        issued = d
        while pending:
            pending.popleft().result()
            if issued < n:
                pending.append(futures.echo(1))
                issued += 1
        return issued
    return run


PEERS = {'floor_unix': floor, 'launchpad': courier_peer('auto'),
         'launchpad_tcp': courier_peer('tcp'), 'launchpad_launched': launched_peer}


def process_cpu(pid: int) -> tuple[float, float]:
    """User and kernel seconds of process ``pid``, threads that ended included."""
    with open(f'/proc/{pid}/stat') as stat:
        fields = stat.read().rsplit(')', 1)[1].split()
    return int(fields[11]) / _TICK, int(fields[12]) / _TICK


def fanin(peer: str, callers: int, seconds: float = 2.0) -> dict:
    """Calls/s of ``callers`` processes of sync calls, and the server's CPU µs per call."""
    if peer == 'floor_unix':
        path = os.path.join(tempfile.mkdtemp(prefix='lp_bench_'), 'sock')
        server = procs.start_server('peers_floor', [f'unix:{path}'])
        pid, spec, stop = server.pid, ('bench.peers_floor', 'connect',
                                       {'address': server.address}), server.stop
    else:
        # A session of its own, as procs gives the floor's server (same autogroup placement).
        process = subprocess.Popen([sys.executable, '-c', SERVER], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True, env=procs.child_env(),
                                   start_new_session=True)
        spec = ('bench.peers_launchpad', 'connect', {'address': process.stdout.readline().strip(),
                                                     'transport': PEER_TRANSPORTS[peer]})
        pid = process.pid

        def stop():
            process.stdin.close()
            process.wait(30)
    try:
        peer_module.fanin_processes(spec, callers, Budget(10**6, 0.5), 1, warmup=0)
        before = process_cpu(pid)
        rate = peer_module.fanin_processes(spec, callers, Budget(10**7, seconds), 1, warmup=0)[0]
        after = process_cpu(pid)
    finally:
        stop()
    calls = rate * seconds
    return {'calls_per_s': rate, 'server_user_us': (after[0] - before[0]) / calls * 1e6,
            'server_kernel_us': (after[1] - before[1]) / calls * 1e6}


PEER_TRANSPORTS = {'launchpad': 'auto', 'launchpad_tcp': 'tcp'}


def show(peer: str, depth: int, result: dict) -> None:
    print(f'{peer} depth {depth}: {result["calls_per_s"]:,.0f} calls/s; the server process '
          f'{result["server_process_us"]:.2f} µs per call (ticks)')
    for side in ('server', 'client'):
        for name, row in result[side].items():
            if max(row.values()) < 0.005:
                continue  # A thread that did nothing here (gRPC's, the accept loop).
            print(f'  {side:6} {name:28} user {row["user_us"]:6.2f} µs  kernel '
                  f'{row["kernel_us"]:6.2f} µs  switches {row["voluntary"]:5.2f} voluntary '
                  f'{row["forced"]:5.2f} forced  per call')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--depth', default='8,64', help='comma list of calls in flight')
    parser.add_argument('--calls', type=int, default=60_000, help='calls per measure')
    parser.add_argument('--peers', default=','.join(PEERS), help='comma list of ' + ','.join(PEERS))
    parser.add_argument('--fanin', default='', help='comma list of caller process counts')
    parser.add_argument('--json', help='write the results here')
    args = parser.parse_args()
    report = {'load_average_start': os.getloadavg(), 'cpus': os.cpu_count(), 'runs': []}
    for callers in [int(n) for n in args.fanin.split(',') if n]:
        for peer in args.peers.split(','):
            if peer != 'floor_unix' and peer not in PEER_TRANSPORTS:
                continue  # No fan-in form (``launchpad_launched`` measures a launched program).
            result = fanin(peer, callers)
            print(f'{peer} fan-in {callers}: {result["calls_per_s"]:,.0f} calls/s; server user '
                  f'{result["server_user_us"]:.2f} µs kernel {result["server_kernel_us"]:.2f} µs '
                  'per call', flush=True)
            report['runs'].append({'peer': peer, 'fanin': callers, **result})
    for depth in [int(d) for d in args.depth.split(',') if d]:
        for peer in args.peers.split(','):
            result = PEERS[peer](depth, args.calls)
            show(peer, depth, result)
            report['runs'].append({'peer': peer, 'depth': depth, **result})
    report['load_average_end'] = os.getloadavg()
    print(f'load average {report["load_average_start"][0]:.2f} at start, '
          f'{report["load_average_end"][0]:.2f} at end ({os.cpu_count()} cpus)')
    if args.json:
        with open(args.json, 'w') as out:
            json.dump(report, out, indent=1)


if __name__ == '__main__':
    main()
