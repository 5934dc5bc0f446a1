"""Fan-in's context switches by where the server sits: the scheduler-autogroup A/B.

With ``/proc/sys/kernel/sched_autogroup_enabled`` at 1 every session is a CFS
scheduling group. A node ``local_mp`` launches leads a session of its own; a
server the benchmark starts plainly shares the benchmark's (its callers').
This runs sync ``ping()`` fan-in against three servers and counts, per call,
the server's voluntary and forced switches, the callers' switches and the CPU
of both sides::

    python -m bench.fanin_sessions --callers 4,16 --reps 3
    # the other setting, for the experiment only, put back whatever happens:
    bash -c 'trap "echo 1 > /proc/sys/kernel/sched_autogroup_enabled" EXIT
             echo 0 > /proc/sys/kernel/sched_autogroup_enabled
             python -m bench.fanin_sessions'

Modes: ``floor`` (the floor's server in the benchmark's session), ``floor_setsid``
(in a session of its own), ``launchpad`` (a courier node launched by local_mp).
"""

from __future__ import annotations

import argparse
import json
import os

from . import peers_floor, peers_launchpad, procs
from .cpu import process_usage
from .harness import Budget
from .peer import FaninPool

MODES = ('floor', 'floor_setsid', 'launchpad')


def autogroup(pid: int) -> str:
    with open(f'/proc/{pid}/autogroup') as f:
        return f.read().split()[0]


def forced_switches(pid: int) -> int:
    """The live threads' involuntary (preempted) switches."""
    n = 0
    for tid in os.listdir(f'/proc/{pid}/task'):
        try:
            with open(f'/proc/{pid}/task/{tid}/status') as f:
                n += sum(int(line.split()[1]) for line in f
                         if line.startswith('nonvoluntary_ctxt_switches:'))
        except OSError:  # The thread ended meanwhile.
            continue
    return n


def _start(mode: str):
    if mode == 'launchpad':
        peer = peers_launchpad.LaunchpadPeer()
        peer.start()
        return peer
    peer = peers_floor.FloorPeer('unix')
    proc = procs.spawn_server('peers_floor', peer.server_args(),
                              new_session=(mode == 'floor_setsid'))
    peer.server = procs.wait_ready(proc)
    peer.client = peer.connect(peer.server.address)
    return peer


def measure(mode: str, callers: int, reps: int, seconds: float) -> dict:
    """``reps`` windows of ``callers`` processes calling one server of ``mode``."""
    peer = _start(mode)
    try:
        pid = peer.server_pid()
        pool = FaninPool(peer.fanin_spec(), callers)
        try:
            groups = {'bench': autogroup(os.getpid()), 'server': autogroup(pid),
                      'callers': sorted({autogroup(p.pid) for p in pool.procs})}
            pool.rep(Budget(10**9, 0.5))  # Warm-up.
            rows = []
            for _ in range(reps):
                before, forced = process_usage(pid), forced_switches(pid)
                rate, calls, used = pool.rep(Budget(10**9, seconds))
                d = process_usage(pid) - before
                rows.append({'calls_per_s': round(rate),
                             'server_switches': round(d.switches / calls, 3),
                             'server_forced': round((forced_switches(pid) - forced) / calls, 3),
                             'callers_switches': round(used.switches / calls, 3),
                             'cpu_us': round((d.cpu_s + used.cpu_s) / calls * 1e6, 1)})
            return {'mode': mode, 'callers': callers, 'groups': groups, 'rows': rows}
        finally:
            pool.close()
    finally:
        peer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--modes', default=','.join(MODES))
    parser.add_argument('--callers', default='4,16')
    parser.add_argument('--reps', type=int, default=3)
    parser.add_argument('--rounds', type=int, default=2)
    parser.add_argument('--seconds', type=float, default=1.5)
    args = parser.parse_args()
    with open('/proc/sys/kernel/sched_autogroup_enabled') as f:
        enabled = f.read().strip()
    for _ in range(args.rounds):
        for callers in [int(c) for c in args.callers.split(',')]:
            for mode in args.modes.split(','):
                result = measure(mode, callers, args.reps, args.seconds)
                print(json.dumps({**result, 'autogroup_enabled': enabled}), flush=True)


if __name__ == '__main__':
    main()
