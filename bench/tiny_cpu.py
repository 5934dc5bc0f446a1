"""CPU of a tiny sync call, user and system, caller and server apart: courier vs the floor.

    python -m bench.tiny_cpu --calls 30000            # compiled frame loop (if built)
    LP_COURIER_PURE=1 python -m bench.tiny_cpu        # pure-Python frame loop

A quick look beside ``bench.run`` (which launches the server as a node and interleaves
peers): here a ``courier.Server`` runs in a forked child and ``echo(1)`` is called from
this process, then the same against the floor's Unix-socket server.  Prints µs per call
of user and system time on each side (``getrusage`` here, ``/proc/<pid>/stat`` there, in
10 ms ticks: use enough calls) and the machine's load average, to note beside the figures.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import time

from . import peers_floor
from .peer import EchoService


def _serve(queue) -> None:
    from launchpad_py import courier
    server = courier.Server(EchoService(), port=0).start()
    queue.put(server.address)
    time.sleep(3600)  # Killed by the parent.


def _proc_cpu(pid: int) -> tuple[float, float]:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _measure(call, server_pid: int, calls: int) -> tuple[float, float, float, float]:
    """µs per call: caller user, caller system, server user, server system."""
    for _ in range(500):
        call()
    mine, theirs = resource.getrusage(resource.RUSAGE_SELF), _proc_cpu(server_pid)
    for _ in range(calls):
        call()
    mine_after, theirs_after = resource.getrusage(resource.RUSAGE_SELF), _proc_cpu(server_pid)
    scale = 1e6 / calls
    return ((mine_after.ru_utime - mine.ru_utime) * scale,
            (mine_after.ru_stime - mine.ru_stime) * scale,
            (theirs_after[0] - theirs[0]) * scale, (theirs_after[1] - theirs[1]) * scale)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=30_000)
    parser.add_argument("--transport", choices=("unix", "tcp"), default="unix",
                        help="the courier's Unix socket against floor_unix, or raw TCP against "
                        "floor_tcp")
    args = parser.parse_args(argv)
    from launchpad_py import courier
    from launchpad_py.courier import frame_loop
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    server = context.Process(target=_serve, args=(queue,), daemon=True)
    server.start()
    floor = peers_floor.FloorPeer(args.transport)
    try:
        client = courier.Client(queue.get(timeout=60),
                                transport="auto" if args.transport == "unix" else "tcp")
        ours = _measure(lambda: client.echo(1), server.pid, args.calls)
        floor.start()
        theirs = _measure(lambda: floor.call("echo", 1), floor.server_pid(), args.calls)
    finally:
        floor.stop()
        server.kill()
        server.join()
    print(f"load {os.getloadavg()[0]:.1f}; µs/call caller user+sys | server user+sys = total")
    for name, row in ((f"launchpad ({frame_loop.active()}, {args.transport})", ours),
                      (floor.name, theirs)):
        print(f"{name:28} {row[0]:5.1f} + {row[1]:4.1f} | {row[2]:5.1f} + {row[3]:4.1f} "
              f"= {sum(row):5.1f}")
    print(f"ratio {sum(ours) / sum(theirs):.2f}")


if __name__ == "__main__":
    main()
