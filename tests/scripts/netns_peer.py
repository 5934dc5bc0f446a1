"""One end of a cross-host courier test, run inside a network namespace.

    python tests/scripts/netns_peer.py serve HOST       # secret on stdin; prints READY addr
    python tests/scripts/netns_peer.py call ADDRESS [nowait]  # secret on stdin (empty: none)

The server keeps serving until its stdin closes; the client prints one JSON
line of what it saw per transport.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

from launchpad_py import courier


class Service:
    def __init__(self):
        self.calls = 0

    def echo(self, value):
        self.calls += 1
        return value

    def count(self) -> int:
        return self.calls


def serve(host: str) -> None:
    secret = bytes.fromhex(sys.stdin.readline().strip())
    with courier.Server(Service(), host=host, secret=secret) as server:
        print('READY', server.address, flush=True)
        sys.stdin.read()  # Serves until the test closes our stdin.


def call(address: str, wait: str = 'wait') -> None:
    line = sys.stdin.readline().strip()
    secret = bytes.fromhex(line) if line else None
    report = {}
    for transport in ('tcp', 'grpc', 'auto'):
        client = courier.Client(address, transport=transport, secret=secret, timeout=20,
                                wait_for_ready=wait != 'nowait')
        try:
            array = np.arange(1 << 18, dtype=np.float32)
            futures = [client.futures.echo(i) for i in range(8)]
            report[transport] = {
                'tiny': client.echo(7),
                'futures': [f.result() for f in futures],
                'array_ok': bool(np.array_equal(client.echo(array), array)),
                'calls': client.count(),
            }
        except courier.CourierError as exc:
            report[transport] = {'error': type(exc).__name__, 'message': str(exc)}
    print(json.dumps(report), flush=True)


if __name__ == '__main__':
    sys.path.insert(0, os.getcwd())
    {'serve': serve, 'call': call}[sys.argv[1]](*sys.argv[2:])
