"""Where a call's CPU goes, caller and server side (py-spy samples).

    python -m bench.profile_call --peer launchpad --seconds 5 --out /tmp/prof
    python -m bench.profile_call --peer launchpad --mode inflight8
    python -m bench.profile_call --peer launchpad --mode fanin4

``--mode tiny`` (the default) loops ``echo(1)`` synchronously; ``inflight8``
keeps 8 futures of ``ping()`` in flight; ``fanin4`` runs 4 caller processes
of ``ping()`` (then only the server, and one caller, are sampled).

Starts one peer of ``bench.run`` (``launchpad``, ``launchpad_tcp``,
``floor_unix``, ``floor_tcp``), calls ``echo(1)`` in a loop on a thread of
this process, and has ``py-spy record --format raw`` sample this process and
the server process at once (``--native`` adds C frames; ``--gil`` samples only
threads holding the GIL, so a thread waiting in a system call is left out).  Prints the top
functions by own samples on each side.  Needs ``pip install py-spy`` and
ptrace rights (root, or ``kernel.yama.ptrace_scope=0``).
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import threading

from . import run
from .harness import Budget
from .peer import FaninPool


def _spy(pid: int, seconds: float, path: str, native: bool, gil: bool = False) -> subprocess.Popen:
    exe = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    cmd = [exe, "record", "-p", str(pid), "-d", str(int(seconds)), "-r", "997", "-f", "raw",
           "-o", path, "--nonblocking", "--threads"]
    if native:
        cmd.append("--native")
    if gil:  # Only threads holding the GIL: Python's own CPU, no thread waiting in a syscall.
        cmd.append("--gil")
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def top(path: str, n: int = 15, skip_idle: bool = True) -> list[tuple[str, float]]:
    """Leaf frames by share of samples, from a py-spy raw (collapsed) file."""
    own, total = collections.Counter(), 0
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip().rpartition(" ")
            frames = stack.split(";")
            if skip_idle and any(k in frames[-1] for k in ("wait (threading", "select", "poll",
                                                            "accept", "_worker (concurrent")):
                continue
            own[frames[-1]] += int(count)
            total += int(count)
    return [(f, c / max(total, 1)) for f, c in own.most_common(n)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--peer", default="launchpad")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--out", default="/tmp/lp_profile")
    ap.add_argument("--native", action="store_true")
    ap.add_argument("--gil", action="store_true",
                    help="sample only threads holding the GIL (Python CPU, not system calls)")
    ap.add_argument("--mode", default="tiny", choices=("tiny", "inflight8", "fanin4"))
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    peer = run.PEERS[args.peer][0]()
    peer.start()
    stop, calls = threading.Event(), [0]
    pool = None

    def loop():
        while not stop.is_set():
            if args.mode == "inflight8":
                calls[0] += peer.inflight("ping", (), 8, Budget(2_000, 0.2))[0]
            elif args.mode == "fanin4":
                calls[0] += pool.rep(Budget(10**9, 0.5))[1]
            else:
                peer.call("echo", 1)
                calls[0] += 1

    try:
        peer.call("ping")
        sides = {"caller": os.getpid(), "server": peer.server_pid()}
        if args.mode == "fanin4":
            pool = FaninPool(peer.fanin_spec(), 4)
            sides["caller"] = pool.procs[0].pid
        t = threading.Thread(target=loop, name="caller")
        t.start()
        spies = {s: _spy(pid, args.seconds, f"{args.out}/{args.peer}_{s}.txt", args.native,
                      args.gil)
                 for s, pid in sides.items()}
        for p in spies.values():
            p.wait()
        stop.set()
        t.join()
    finally:
        if pool is not None:
            pool.close()
        peer.stop()
    print(f"{args.peer}: {calls[0]} calls")
    for side in sides:
        print(f"-- {side}")
        for frame, share in top(f"{args.out}/{args.peer}_{side}.txt"):
            print(f"{share:6.1%}  {frame}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
