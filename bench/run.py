"""Measures launchpad_py and its peers side by side in one run; ratios to the floor.

Run from the repository root (see docs/performance.md for the set-up line)::

    python -m bench.run --json bench/results.json          # 1 KiB, 1 MiB, 64 MiB
    python -m bench.run --big --json bench/results.json    # adds 1 GiB
    python -m bench.plot bench/results.json docs/images/bandwidth.png

Measures (each repeated ``--reps`` times after one warm-up, median and
min-max reported; every repetition is bounded in calls and seconds):

``tiny_sync``      one caller, one server, ``echo(1)``: microseconds per call
``inflight8``      8 calls outstanding from one caller: calls/s
``inflight64``     64 calls outstanding from one caller: calls/s
``inflight8_threads``  floor only: 8 client threads, one connection each,
                   sync calls (the GIL-bound alternative to pipelining)
``fanin4``         4 caller processes, one server, ``ping()``: total calls/s
``fanin16``        16 caller processes, likewise
``rt:<size>``      round trip of a float32 array returned unchanged: ms
``rt_GBps:<size>`` array bytes / round-trip time (GB = 1e9 B), plus the
                   memcpy ceiling (one ``np.copyto`` of the same bytes)
``launch:<n>``     start ``n`` servers (Ray actors; floor: server processes)
                   until each answered one call: seconds (no warm-up)
``idle_rss``       RSS of the server process (Ray: the actor's worker) after
                   one call; launchpad also reports every node of an idle
                   10-node program
``batched16``      launchpad only: 16 caller threads, sync calls, against a
                   ``batched_handler(16)`` method and against plain ``echo``

``tiny_sync``, ``inflight*`` and ``fanin*`` run interleaved across peers
(bench.interleave: all peers started, then rounds of one repetition each)
and carry ``cpu us`` (CPU microseconds per call, user + system, caller and
server processes together; fan-in: the caller processes and the server) and
``csw`` (voluntary + involuntary context switches per call), see bench.cpu;
``cpu x fl`` and ``cpu x tcp`` are the CPU ratios to the two floors.

The ``x floor`` column is the cost ratio to ``floor_unix`` (time / floor
time, or floor rate / rate; >1 means slower); ``x tcp`` is the same ratio to
``floor_tcp``, the one that matters for the paths between hosts.  To add a peer, write a
:class:`bench.peer.Peer` adapter and add it to :data:`PEERS`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback

from . import interleave, peers_floor, peers_grpc, peers_launchpad, peers_ray, procs
from .cpu import CpuMeter
from .harness import DEFAULT_REPS, Budget, Result, call_loop, fmt_value, measure
from .interleave import FANIN_BUDGET, FANIN_CALLERS

BASELINE = "floor_unix"
TCP_BASELINE = "floor_tcp"
SIZES = {"1KiB": 2**10, "1MiB": 2**20, "64MiB": 2**26, "1GiB": 2**30}
DEFAULT_SIZES = ["1KiB", "1MiB", "64MiB"]

# name -> (factory, availability check or None)
PEERS = {
    "launchpad": (lambda: peers_launchpad.LaunchpadPeer("auto"), None),
    "launchpad_grpc": (lambda: peers_launchpad.LaunchpadPeer("grpc"), None),
    "launchpad_tcp": (lambda: peers_launchpad.LaunchpadPeer("tcp"), None),
    "launchpad_pure": (lambda: peers_launchpad.LaunchpadPeer("auto", pure=True), None),
    "launchpad_tcp_pure": (lambda: peers_launchpad.LaunchpadPeer("tcp", pure=True), None),
    "launchpad_tcp_tls": (lambda: peers_launchpad.LaunchpadPeer("tcp", tls=True), None),
    "launchpad_grpc_tls": (lambda: peers_launchpad.LaunchpadPeer("grpc", tls=True), None),
    "floor_unix": (lambda: peers_floor.FloorPeer("unix"), None),
    "floor_tcp": (lambda: peers_floor.FloorPeer("tcp"), None),
    "grpc": (lambda: peers_grpc.GrpcPeer(), peers_grpc.available),
    "ray": (lambda: peers_ray.RayPeer(), peers_ray.available),
}

ARRAY_BUDGET = Budget(max_calls=2_000, max_seconds=0.5)
BIG_ARRAY_BUDGET = Budget(max_calls=1, max_seconds=0.0)  # one call per rep
LAUNCH_TIMEOUT = 300.0


class Run:
    def __init__(self, args):
        self.args = args
        self.results: list[Result] = []
        self._arrays = {}

    def add(self, r: Result) -> Result:
        self.results.append(r)
        return r

    def log(self, msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    def array(self, size_name: str):
        import numpy as np

        if size_name not in self._arrays:
            n = SIZES[size_name] // 4
            self._arrays[size_name] = np.random.default_rng(0).random(n, dtype=np.float32)
        return self._arrays[size_name]

    # -- measures --------------------------------------------------------------
    def guarded(self, measure_name: str, peer_name: str, unit: str, fn, **kw) -> None:
        """Runs one measure; a failure becomes a noted row, not a crash."""
        self.log(f"{peer_name}: {measure_name}")
        r = Result(measure_name, peer_name, unit, **kw)
        try:
            out = fn()
            if isinstance(out, Result):
                return
            r.values = out
        except Exception as e:  # noqa: BLE001 - reported in the table
            r.note = f"error: {type(e).__name__}: {e}"
            traceback.print_exc()
        self.add(r)

    def start_peer(self, name: str, peer) -> bool:
        """Starts ``peer``; a failure becomes a noted row and ``False``."""
        self.log(f"starting {name}")
        t0 = time.perf_counter()
        try:
            peer.start()
            peer.call("ping")
        except Exception as e:  # noqa: BLE001 - one peer failing does not end the run
            traceback.print_exc()
            self.add(Result("all", name, "", note=f"error: {type(e).__name__}: {e}"))
            try:
                peer.stop()
            except Exception:  # noqa: BLE001 - already reported
                pass
            return False
        note = "ray.init + first actor answers" if name == "ray" else "spawn server + connect"
        self.add(Result("startup", name, "s", [time.perf_counter() - t0], note=note))
        return True

    def run_peer(self, name: str, peer) -> None:
        """The rows that are not interleaved (see bench.interleave for those that are)."""
        reps = self.args.reps
        try:
            if "idle_rss" in peer.supports:
                self.guarded("idle_rss", name, "bytes", lambda: self.idle_rss(name, peer))
            if "fanin" in peer.supports and peer.fanin_spec() is None:
                for callers in FANIN_CALLERS:
                    self.guarded(f"fanin{callers}", name, "calls/s",
                                 lambda: peer.fanin(callers, FANIN_BUDGET, reps),
                                 higher_is_better=True)
            if hasattr(peer, "batched"):
                for method in ("echo_batched", "echo"):
                    self.guarded(f"batched16:{method}", name, "calls/s",
                                 lambda: measure(lambda: peer.batched(16, method, FANIN_BUDGET),
                                                 reps),
                                 higher_is_better=True, note="16 caller threads")
            for size_name in self.args.sizes:
                self.guarded(f"rt:{size_name}", name, "ms",
                             lambda: self.array_rt(name, peer, size_name))
            if "launch" in peer.supports and self.args.launch:
                for n in self.args.launch:
                    launch_reps = 1 if n >= 100 else self.args.launch_reps
                    self.guarded(
                        f"launch:{n}", name, "s",
                        lambda: [peer.launch(n, LAUNCH_TIMEOUT) for _ in range(launch_reps)],
                        note="no warm-up",
                    )
        finally:
            self.log(f"stopping {name}")
            peer.stop()

    def idle_rss(self, name, peer):
        time.sleep(0.5)
        pid = peer.server_pid()
        r = Result("idle_rss", name, "bytes", [procs.rss_bytes(pid)],
                   extra={"pid": pid, "uss": procs.uss_bytes(pid)})
        if hasattr(peer, "program_rss"):
            sizes = peer.program_rss(10)
            r.note = "node process; idle 10-node program in extra"
            r.extra["program_rss"] = sizes
            r.extra["cluster_rss_total"] = sum(sizes)
            r.extra["cluster_processes"] = len(sizes)
        if name == "ray":
            ps = peer.cluster_processes()
            r.note = "ray actor worker; whole local Ray instance in extra"
            r.extra["cluster"] = [{"pid": p, "name": n, "rss": s} for p, n, s in ps]
            r.extra["cluster_rss_total"] = sum(s or 0 for _, _, s in ps)
            r.extra["cluster_processes"] = len(ps)
        self.add(r)
        return r

    def array_rt(self, name, peer, size_name):
        import numpy as np

        a = self.array(size_name)
        back = peer.call("echo", a)  # correctness, outside timing
        if not (isinstance(back, np.ndarray) and back.dtype == a.dtype and np.array_equal(back, a)):
            raise AssertionError(f"{name} returned a different array for {size_name}")
        del back
        budget = BIG_ARRAY_BUDGET if SIZES[size_name] >= 2**30 else ARRAY_BUDGET
        # CPU of this process and the server's, as for the interleaved rows (bench.interleave).
        meter = CpuMeter(interleave.server_pids(peer))

        def rep():
            before = meter.snapshot()
            n, dt = call_loop(lambda: peer.call("echo", a), budget)
            cpu_us, switches = meter.per_call(before, meter.snapshot(), n)
            return dt / n, cpu_us, switches

        rep()  # Warm-up: the segments' first pages, the peer's first mapping.
        reps = [rep() for _ in range(self.args.reps)]
        secs = [r[0] for r in reps]
        nbytes = SIZES[size_name]
        self.add(Result(f"rt_GBps:{size_name}", name, "GB/s", [nbytes / s / 1e9 for s in secs],
                        higher_is_better=True))
        result = Result(f"rt:{size_name}", name, "ms", [s * 1e3 for s in secs],
                        cpu_us_per_call=[r[1] for r in reps],
                        switches_per_call=[r[2] for r in reps])
        self.add(result)
        return result

    def memcpy(self) -> None:
        for size_name in self.args.sizes:
            nbytes = SIZES[size_name]
            budget = Budget(max_calls=100_000, max_seconds=0.3)

            def run():
                return measure(peers_floor.memcpy_rep(nbytes, budget), self.args.reps)

            self.log(f"memcpy: {size_name}")
            secs = run()
            self.add(Result(f"rt:{size_name}", "memcpy", "ms", [s * 1e3 for s in secs],
                            note="one np.copyto (ceiling)"))
            self.add(Result(f"rt_GBps:{size_name}", "memcpy", "GB/s",
                            [nbytes / s / 1e9 for s in secs], higher_is_better=True,
                            note="one np.copyto (ceiling)"))


# -- reporting ------------------------------------------------------------------

def ratios(results: list[Result], baseline: str = BASELINE) -> dict:
    base = {r.measure: r.median for r in results if r.peer == baseline and r.values}
    out = {}
    for r in results:
        b = base.get(r.measure)
        if not r.values or not b or not r.median:
            continue
        out[(r.measure, r.peer)] = (b / r.median) if r.higher_is_better else (r.median / b)
    return out


def cpu_ratios(results: list[Result], baseline: str = BASELINE) -> dict:
    """CPU per call over the baseline's CPU per call (>1 means more CPU per call)."""
    base = {r.measure: r.cpu_median for r in results if r.peer == baseline and r.cpu_median}
    return {(r.measure, r.peer): r.cpu_median / base[r.measure]
            for r in results if r.cpu_median and base.get(r.measure)}


def measure_order(m: str) -> tuple:
    head, _, size = m.partition(":")
    order = ["all", "startup", "idle_rss", "tiny_sync", "inflight8", "inflight64",
             "inflight8_threads", "fanin4", "fanin16", "batched16", "rt", "rt_GBps", "launch"]
    rank = order.index(head) if head in order else len(order)
    key = SIZES.get(size, int(size) if size.isdigit() else 0)
    return (rank if head not in ("rt", "rt_GBps") else order.index("rt"), key, head)


def table(results: list[Result]) -> str:
    rat = ratios(results)
    rat_tcp = ratios(results, TCP_BASELINE)
    cpu_rat, cpu_rat_tcp = cpu_ratios(results), cpu_ratios(results, TCP_BASELINE)
    gbps = {(r.measure.split(":", 1)[1], r.peer): r.median
            for r in results if r.measure.startswith("rt_GBps:") and r.values}
    peer_order = list(PEERS) + ["memcpy"]
    results = [r for r in results if not r.measure.startswith("rt_GBps:")]
    rows = sorted(results, key=lambda r: (measure_order(r.measure),
                                          peer_order.index(r.peer) if r.peer in peer_order else 99))
    lines = [f"{'measure':<18} {'peer':<18} {'median':>12} {'min - max':>23} {'unit':<8} "
             f"{'x floor':>8} {'x tcp':>6} {'cpu us':>7} {'csw':>5} {'cpu x fl':>8} "
             f"{'cpu x tcp':>9}  note", "-" * 150]
    for r in rows:
        if r.values:
            med = fmt_value(r.median, r.unit)
            span = f"{fmt_value(r.min, r.unit)} - {fmt_value(r.max, r.unit)}"
            ratio = rat.get((r.measure, r.peer))
            ratio_s = f"{ratio:.3g}" if ratio is not None else "-"
            ratio_tcp = rat_tcp.get((r.measure, r.peer))
            tcp_s = f"{ratio_tcp:.3g}" if ratio_tcp is not None else "-"
        else:
            med, span, ratio_s, tcp_s = "-", "", "", ""
        unit = "" if r.unit == "bytes" else r.unit
        note = r.note
        if r.measure.startswith("rt:") and gbps.get((r.measure[3:], r.peer)) is not None:
            note = f"{gbps[(r.measure[3:], r.peer)]:.3g} GB/s" + (f"; {note}" if note else "")
        if r.measure == "idle_rss" and r.extra.get("cluster_rss_total"):
            note += (f" ({r.peer}: {r.extra['cluster_processes']} processes, "
                     f"{r.extra['cluster_rss_total'] / 2**20:.0f} MiB RSS total)")
        key = (r.measure, r.peer)
        cpu = (f"{r.cpu_median:>7.3g} {r.switches_median:>5.2g} "
               f"{_fmt_ratio(cpu_rat.get(key)):>8} {_fmt_ratio(cpu_rat_tcp.get(key)):>9}"
               if r.cpu_median else " " * 32)
        lines.append(f"{r.measure:<18} {r.peer:<18} {med:>12} {span:>23} {unit:<8} {ratio_s:>8} "
                     f"{tcp_s:>6} {cpu}  {note}")
    return "\n".join(lines)


def _fmt_ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def meta(args, started: float) -> dict:
    def ver(mod):
        try:
            return __import__(mod).__version__
        except Exception:  # noqa: BLE001
            return None

    thp = None
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            thp = f.read().strip()
    except OSError:
        pass
    return {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "numpy": ver("numpy"),
        "grpcio": ver("grpc"),
        "ray": peers_ray.version(),
        "psutil": ver("psutil"),
        "transparent_hugepage": thp,
        "argv": sys.argv,
        "reps": args.reps,
        "sizes": args.sizes,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "loadavg_at_start": args.loadavg_at_start,
        "loadavg_at_end": os.getloadavg(),
    }


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="write results to this path")
    ap.add_argument("--reps", type=int, default=DEFAULT_REPS, help="repetitions per measure")
    ap.add_argument("--big", action="store_true", help="add the 1 GiB round trip")
    ap.add_argument("--sizes", default=",".join(DEFAULT_SIZES),
                    help=f"comma list from {','.join(SIZES)}")
    ap.add_argument("--peers", default=",".join(PEERS), help="comma list of peers to run")
    ap.add_argument("--launch", default="10,100",
                    help="comma list of actor/server counts for launch-to-first-call ('' skips)")
    ap.add_argument("--launch-reps", type=int, default=3,
                    help="repetitions of launch measures below 100 (100 and more run once)")
    args = ap.parse_args(argv)
    args.sizes = [s for s in args.sizes.split(",") if s]
    if args.big and "1GiB" not in args.sizes:
        args.sizes.append("1GiB")
    for s in args.sizes:
        if s not in SIZES:
            ap.error(f"unknown size {s}")
    args.peers = [p for p in args.peers.split(",") if p]
    for p in args.peers:
        if p not in PEERS:
            ap.error(f"unknown peer {p}")
    args.launch = [int(n) for n in args.launch.split(",") if n]
    return args


def planned_measures(args) -> list[str]:
    """Rows an unavailable peer would have had (so the table shows why)."""
    ms = ["startup", "idle_rss", "tiny_sync", "inflight8", "inflight64", "fanin4", "fanin16"]
    ms += [f"rt:{s}" for s in args.sizes]
    ms += [f"launch:{n}" for n in args.launch]
    return ms


def main(argv=None) -> int:
    args = parse_args(argv)
    args.loadavg_at_start = os.getloadavg()
    started = time.time()
    t0 = time.perf_counter()
    run = Run(args)
    run.memcpy()
    started_peers = {}
    try:
        for name in args.peers:
            factory, check = PEERS[name]
            if check is not None:
                ok, why = check()
                if not ok:
                    run.log(f"{name}: {why}")
                    for m in planned_measures(args):
                        run.add(Result(m, name, "", note=why))
                    continue
            peer = factory()
            if run.start_peer(name, peer):
                started_peers[name] = peer
        run.results += interleave.interleaved(started_peers, args.reps, run.log)
    except BaseException:
        for peer in started_peers.values():
            peer.stop()
        raise
    for name, peer in started_peers.items():
        try:
            run.run_peer(name, peer)
        except Exception as e:  # noqa: BLE001 - one peer failing does not end the run
            traceback.print_exc()
            run.add(Result("all", name, "", note=f"error: {type(e).__name__}: {e}"))
    total = time.perf_counter() - t0
    print(table(run.results))
    print(f"\ntotal runtime: {total:.1f} s; load average at start {args.loadavg_at_start[0]:.2f}, "
          f"at end {os.getloadavg()[0]:.2f} ({os.cpu_count()} cpus)")
    if args.json:
        doc = {"meta": {**meta(args, started), "total_runtime_s": total},
               "baseline": BASELINE,
               "results": [r.to_json() for r in run.results],
               "ratios": [{"measure": m, "peer": p, "x_floor": v} for (m, p), v in ratios(run.results).items()],
               "ratios_tcp": [{"measure": m, "peer": p, "x_floor_tcp": v}
                              for (m, p), v in ratios(run.results, TCP_BASELINE).items()],
               "cpu_ratios": [{"measure": m, "peer": p, "cpu_x_floor": v}
                              for (m, p), v in cpu_ratios(run.results).items()],
               "cpu_ratios_tcp": [{"measure": m, "peer": p, "cpu_x_floor_tcp": v}
                                  for (m, p), v in cpu_ratios(run.results, TCP_BASELINE).items()]}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
