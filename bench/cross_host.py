"""Courier between two network-namespace hosts, against the raw-TCP floor, in one run.

The servers run in ``lp-h1`` (10.250.0.11), the caller in ``lp-h2``: traffic
crosses a veth pair and a bridge, as between two machines on one switch
(without the wire's own latency). Needs root and the hosts of
``shared/infra/ssh_hosts.sh up``::

    python -m bench.cross_host --json bench/cross_host.json

Rows (median of ``--reps``): ``tiny_sync`` (µs per ``echo(1)``), ``inflight8``
(8 calls outstanding from one caller, calls/s), ``rt:64MiB`` (a float32 array
returned unchanged, ms); ``x floor_tcp`` is the cost ratio to ``floor_tcp``
(the same frames over a plain socket, one thread per connection, pipelined):
time ÷ floor's time, or floor's rate ÷ rate, so above 1 is slower.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import threading
import time

SERVER_NS, CLIENT_NS, SERVER_IP = 'lp-h1', 'lp-h2', '10.250.0.11'
TINY, INFLIGHT, ARRAY = 'tiny_sync', 'inflight8', 'rt:64MiB'
PEERS = ('floor_tcp', 'launchpad_tcp', 'launchpad_tcp_tls', 'launchpad_grpc')


def serve_floor(host: str) -> None:
    """A floor server on the namespace's interface (only ever started inside lp-h1)."""
    from . import peers_floor
    from .peer import EchoService
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind((host, 0))
    listener.listen(16)
    print('READY', f'tcp:{host}:{listener.getsockname()[1]}', flush=True)
    threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
    service = EchoService()
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=peers_floor._serve_connection, args=(conn, service),
                         daemon=True).start()


def serve_courier(host: str) -> None:
    """Courier servers (plain and TLS) with the secret and credentials read from stdin."""
    from launchpad_py import courier
    from .peer import EchoService
    config = json.loads(sys.stdin.readline())
    secret = bytes.fromhex(config['secret'])
    tls = courier.TlsCredentials(config['cert'].encode(), config['key'].encode())
    plain = courier.Server(EchoService(), host=host, secret=secret).start()
    encrypted = courier.Server(EchoService(), host=host, secret=secret, tls=tls).start()
    print('READY', plain.address, encrypted.address, flush=True)
    sys.stdin.read()
    plain.stop()
    encrypted.stop()


def _median_of(reps: int, fn) -> float:
    fn()  # Warm-up.
    return statistics.median(fn() for _ in range(reps))


def _tiny(call) -> float:
    n, t0 = 0, time.perf_counter()
    while n < 2000 and time.perf_counter() - t0 < 0.5:
        call('echo', 1)
        n += 1
    return (time.perf_counter() - t0) / n * 1e6


def measure(reps: int) -> None:
    """Runs in lp-h2: every peer's rows, as one JSON line."""
    import numpy as np
    from launchpad_py import courier
    from .harness import Budget
    from .peer import fifo_inflight
    from .peers_floor import FloorClient
    config = json.loads(sys.stdin.readline())
    secret = bytes.fromhex(config['secret'])
    tls = courier.TlsCredentials(config['cert'].encode(), config['key'].encode())
    array = np.ones(1 << 24, dtype=np.float32)
    budget = Budget(max_calls=100_000, max_seconds=0.5)
    results = {}
    for peer in PEERS:
        if peer == 'floor_tcp':
            client = FloorClient(config['floor'])
            call = client.call
            inflight = lambda: client.pipelined('echo', (1,), 8, budget)  # noqa: E731
        else:
            remote = courier.Client(
                config['tls_address'] if peer.endswith('_tls') else config['address'],
                transport='grpc' if peer == 'launchpad_grpc' else 'tcp', secret=secret,
                tls=tls if peer.endswith('_tls') else None, timeout=60)
            call = remote.call
            futures = remote.futures
            inflight = lambda: fifo_inflight(  # noqa: E731
                lambda: futures.echo(1), lambda f: f.result(), 8, budget)

        def rate():
            done, seconds = inflight()
            return done / seconds

        def round_trip():
            t0 = time.perf_counter()
            call('echo', array)
            return (time.perf_counter() - t0) * 1e3

        results[peer] = {TINY: _median_of(reps, lambda: _tiny(call)),
                         INFLIGHT: _median_of(reps, rate), ARRAY: _median_of(reps, round_trip)}
    print(json.dumps(results), flush=True)


def _in(namespace: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(['ip', 'netns', 'exec', namespace, sys.executable, '-m',
                             'bench.cross_host', *args], text=True, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, cwd=os.path.dirname(os.path.dirname(
                                os.path.abspath(__file__))))


def _ratio(peer_value: float, floor_value: float, measure: str) -> float:
    return floor_value / peer_value if measure == INFLIGHT else peer_value / floor_value


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--json', help='write results to this path')
    ap.add_argument('--reps', type=int, default=5)
    args = ap.parse_args(argv)
    from launchpad_py import courier
    tls = courier.TlsCredentials.generate()
    config = {'secret': secrets.token_bytes(32).hex(), 'cert': tls.certificate.decode(),
              'key': tls.private_key.decode()}
    floor = _in(SERVER_NS, 'serve-floor', SERVER_IP)
    server = _in(SERVER_NS, 'serve-courier', SERVER_IP)
    try:
        config['floor'] = floor.stdout.readline().split()[1]
        server.stdin.write(json.dumps(config) + '\n')
        server.stdin.flush()
        _, config['address'], config['tls_address'] = server.stdout.readline().split()
        caller = _in(CLIENT_NS, 'measure', str(args.reps))
        out, _ = caller.communicate(json.dumps(config) + '\n', timeout=600)
        results = json.loads(out.strip().splitlines()[-1])
    finally:
        for process in (floor, server):
            process.stdin.close()
            process.wait(timeout=30)
    print(f"{'measure':<10} {'peer':<18} {'median':>10}  {'x floor_tcp':>11}")
    for measure_name, unit in ((TINY, 'us'), (INFLIGHT, 'calls/s'), (ARRAY, 'ms')):
        base = results['floor_tcp'][measure_name]
        for peer in PEERS:
            value = results[peer][measure_name]
            print(f'{measure_name:<10} {peer:<18} {value:>10.1f}  '
                  f'{_ratio(value, base, measure_name):>11.2f}  {unit}')
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'started': time.strftime('%Y-%m-%dT%H:%M:%S'), 'reps': args.reps,
                       'loadavg': os.getloadavg(), 'results': results}, f, indent=1)
    return 0


if __name__ == '__main__':
    if len(sys.argv) > 1 and sys.argv[1] in ('serve-floor', 'serve-courier', 'measure'):
        role, value = sys.argv[1], sys.argv[2]
        if role == 'measure':
            measure(int(value))
        else:
            {'serve-floor': serve_floor, 'serve-courier': serve_courier}[role](value)
    else:
        sys.exit(main())
