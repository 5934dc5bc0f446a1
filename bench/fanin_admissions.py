"""Fan-in: when the server admitted each TCP connection, beside when its calls came (issue 25).

    python -m bench.fanin_admissions --launch_type ssh --nodes 1000 --json /tmp/admissions.json

Separates the two candidate limits of fan-in over ssh at 1,000 clients: the server's admitting
thread (``tcp_handshakes.Gate._admit_each`` starts each authenticated connection's reader
thread, one at a time, and ``Thread.start`` waits for the thread to run) or the clients' own
start (a fresh interpreter each). The server, ``TimedCounter``, is bench.scale's counter in a
node process whose TCP door is wrapped when this module is imported there: for each connection
it records when it was accepted, when its handshake finished (queued for admission), when
the admitting thread took it and when admission returned. If the admitter is the limit, its
queue grows over the run (``wait_ms_median_by_tenth`` rises from the first tenth of the
connections to the last), it is busy most of the span (``admitter_busy``) and the last
admission comes long after the last handshake; if the clients are, the accepts themselves are
spread over the span (``first_accepted_s`` .. ``last_accepted_s``, from the first call) and
the last admission follows the last accept closely. Each client also says when it began (its
executable running) and how long its first call took: clients that begin early and wait long
for their first answer point at the server (its ``Endpoints`` answer, door or admitter);
clients that begin spread over the span point at their own start; the server's gRPC
``Endpoints`` answers (their times, ``endpoints_answered``) come between. Also bench.scale's fan-in figures: calls,
and calls/s from the first call to the last.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import threading
import time
import uuid

import launchpad_py as lp
from bench import scale, scale_nodes
from launchpad_py.courier.transports import grpc_server, tcp_handshakes

# (accepted, queued, taken, admitted) per connection, monotonic.
_ADMISSIONS: list[tuple[float, float, float, float]] = []


class _TimedQueue:
    """The door's admission queue, noting when each socket was accepted and put in it."""

    def __init__(self, gate, inner, queued: collections.deque):
        self._gate, self._inner, self._queued = gate, inner, queued

    def put(self, item) -> None:
        if item is not None:  # The door forgot the handshake just before: its accept time.
            self._queued.append((self._gate.last_accepted, time.monotonic()))
        self._inner.put(item)

    def get(self):
        return self._inner.get()


def _timed_gate_init(self, listener, identity, name, admit, *rest) -> None:
    queued: collections.deque = collections.deque()

    def timed_admit(sock, peer) -> None:
        taken = time.monotonic()
        admit(sock, peer)
        _ADMISSIONS.append((*queued.popleft(), taken, time.monotonic()))

    _gate_init(self, listener, identity, name, timed_admit, *rest)
    self._admitted = _TimedQueue(self, self._admitted, queued)


def _timed_forget(self, entry) -> None:
    self.last_accepted = entry.deadline - self._timeout
    _gate_forget(self, entry)


_ENDPOINTS: list[tuple[float, float]] = []  # (began, answered) of each gRPC Endpoints call.


def _timed_endpoints(self, requests, context):
    began = time.monotonic()
    try:
        return _endpoints(self, requests, context)
    finally:
        _ENDPOINTS.append((began, time.monotonic()))


_endpoints = grpc_server.GrpcListener._handle_endpoints
grpc_server.GrpcListener._handle_endpoints = _timed_endpoints
_gate_init, _gate_forget = tcp_handshakes.Gate.__init__, tcp_handshakes.Gate._forget
# In every process that imports this bench (the server's, by unpickling TimedCounter).
tcp_handshakes.Gate.__init__, tcp_handshakes.Gate._forget = _timed_gate_init, _timed_forget


class TimedCounter(scale_nodes.Counter):
    """bench.scale's counter, which can also say when its connections were admitted and
    when its clients began."""

    def __init__(self, autogroup_nice: int | None = None):
        super().__init__()
        if autogroup_nice is not None:  # The scheduling group's weight (this node's session).
            with open('/proc/self/autogroup', 'w') as f:
                f.write(str(autogroup_nice))
        self.clients: list[tuple[float, float]] = []  # (began, first answer), monotonic.
        self.cpu: list[tuple[float, float, float]] = []  # (when, CPU s, runqueue wait s).
        threading.Thread(target=self._sample_cpu, daemon=True).start()

    def _sample_cpu(self) -> None:
        """Twice a second: this process's CPU time and its threads' summed wait for a CPU
        (``/proc/self/task/*/schedstat``): a starved server waits, a blocked one does neither."""
        while True:
            waited = 0
            for task in os.listdir('/proc/self/task'):
                try:
                    with open(f'/proc/self/task/{task}/schedstat') as f:
                        waited += int(f.read().split()[1])
                except (OSError, IndexError, ValueError):
                    pass
            self.cpu.append((time.monotonic(), time.process_time(), waited / 1e9))
            time.sleep(0.5)  # A sampling period, not a synchronization.

    def note_client(self, began: float, answered: float) -> None:
        self.clients.append((began, answered))  # Not counted: wait_count sees adds only.

    def client_starts(self) -> dict:
        """When the clients began (their executable running), from the first call, and how
        long their first call took (Endpoints, dial, handshake, admission, the call)."""
        first = self.first or 0.0
        began = sorted(b for b, _ in self.clients)
        latencies = sorted(a - b for b, a in self.clients)
        ordered = [a - b for b, a in sorted(self.clients)]
        tenths = [ordered[i * len(ordered) // 10:(i + 1) * len(ordered) // 10] for i in range(10)]
        return {'clients': len(began), 'first_call_monotonic': first,
                'first_began_s': began[0] - first,
                'median_began_s': statistics.median(began) - first,
                'last_began_s': began[-1] - first, 'first_call_ms': _quantiles(latencies),
                'first_call_ms_median_by_tenth': [
                    round(1000 * statistics.median(tenth), 1) for tenth in tenths if tenth],
                'each': [(round(b - first, 3), round(a - first, 3))  # (began, answered) s.
                         for b, a in sorted(self.clients)],
                'endpoints_answered': [(round(b - first, 3), round(a - first, 3))
                                       for b, a in sorted(_ENDPOINTS)],
                'server_cpu': [(round(t - first, 2), round(c, 3), round(w, 3))
                               for t, c, w in self.cpu]}

    def admissions(self) -> dict:
        """The admissions, in seconds from the first call (negative: before it)."""
        rows, first = list(_ADMISSIONS), self.first or 0.0
        if not rows:
            return {'admitted': 0}
        accepted, queued, taken, admitted = (sorted(column) for column in zip(*rows))
        handshakes = sorted(q - a for a, q, _, _ in rows)
        waits = sorted(t - q for _, q, t, _ in rows)
        starts = sorted(d - t for _, _, t, d in rows)
        span = admitted[-1] - queued[0]
        return {'admitted': len(rows),
                'first_accepted_s': accepted[0] - first, 'last_accepted_s': accepted[-1] - first,
                'first_queued_s': queued[0] - first, 'last_queued_s': queued[-1] - first,
                'last_admitted_s': admitted[-1] - first,
                'last_call_s': (self.last or 0.0) - first,
                'handshake_ms': _quantiles(handshakes), 'wait_ms': _quantiles(waits),
                'wait_ms_median_by_tenth': _by_tenth(rows), 'admit_ms': _quantiles(starts),
                'admitter_busy': sum(starts) / span if span > 0 else None,
                'each': [tuple(round(t - first, 3) for t in row) for row in sorted(rows)]}


def _by_tenth(rows: list[tuple]) -> list[float]:
    """The median wait of each tenth of the connections, in the order they were queued: a
    queue the admitter cannot keep up with grows, and its later tenths wait longer."""
    rows = sorted(rows, key=lambda row: row[1])
    tenths = [rows[i * len(rows) // 10:(i + 1) * len(rows) // 10] for i in range(10)]
    return [round(1000 * statistics.median(t - q for _, q, t, _ in tenth), 1)
            for tenth in tenths if tenth]


def _quantiles(values: list[float]) -> dict:
    return {'median': 1000 * statistics.median(values),
            'p90': 1000 * values[int(0.9 * (len(values) - 1))], 'max': 1000 * values[-1]}


def call_server_timed(server, calls: int) -> None:
    """bench.scale's client, which also tells the server when it began and when its first
    call was answered (one clock: the namespace hosts share this machine's)."""
    began = time.monotonic()
    server.add(1)
    server.note_client(began, time.monotonic())
    for _ in range(calls - 1):
        server.add(1)


def fan_in(launch_type: str, nodes: int, calls: int, autogroup_nice: int | None = None) -> dict:
    """One ``TimedCounter`` and ``nodes`` clients making ``calls`` sync calls each."""
    from bench import fanin_admissions  # By name, not __main__: its nodes import this module.
    program = lp.Program(f'fan_in_admissions_{nodes}')
    server = program.add_node(lp.CourierNode(fanin_admissions.TimedCounter, autogroup_nice),
                              label='server')
    with program.group('client'):
        for _ in range(nodes):
            program.add_node(lp.PyNode(fanin_admissions.call_server_timed, server, calls))
    load = scale.load_average()
    start = time.monotonic()  # One clock with the nodes': the namespace hosts share it.
    with lp.launch(program, launch_type=launch_type,
                   **scale.launch_arguments(launch_type, program, uuid.uuid4().hex)):
        ready = time.monotonic()
        counter = server.dereference()
        count, rate = counter.wait_count(nodes * calls, 600)
        admissions = counter.admissions()
        clients = counter.client_starts()
    first = clients.pop('first_call_monotonic')
    return {'launch_type': launch_type, 'nodes': nodes, 'ready_s': ready - start,
            'launch_called_s': start - first, 'launch_returned_s': ready - first, 'calls': count,
            'expected_calls': nodes * calls, 'fan_in_calls_per_s': rate,
            'admissions': admissions, 'clients': clients, 'load_average': {'start': load,
                                                       'end': scale.load_average()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--launch_type', default='ssh')
    parser.add_argument('--nodes', type=int, default=1000)
    parser.add_argument('--calls', type=int, default=20)
    parser.add_argument('--server_autogroup_nice', type=int,
                        help="the server's scheduling group's nice (-20..19; root): does the "
                        'server answer while the clients start when its group weighs more?')
    parser.add_argument('--json', help='also write the result here')
    args = parser.parse_args()
    result = fan_in(args.launch_type, args.nodes, args.calls, args.server_autogroup_nice)
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'command': sys.argv[1:], **result}, f, indent=1)


if __name__ == '__main__':
    main()
