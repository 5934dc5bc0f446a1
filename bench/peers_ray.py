"""Ray peer: an actor with ``num_cpus=0`` called with ``.remote()`` + ``ray.get``.

Ray is optional: :func:`available` says why not when ``import ray`` fails.
A local Ray instance is started with ``ray.init(num_cpus=2,
include_dashboard=False, log_to_driver=False)`` and shut down by ``stop``.
"""

from __future__ import annotations

import os
import time
from collections import deque

from . import procs
from .harness import Budget, call_loop
from .peer import EchoService, Peer

INSTALL_HINT = "ray not installed (pip install ray)"


def available() -> tuple[bool, str]:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False, INSTALL_HINT
    return True, ""


def version() -> str | None:
    try:
        import ray

        return ray.__version__
    except ImportError:
        return None


def _make_classes(ray):
    """Actor classes, defined only once ray is importable."""

    EchoActor = ray.remote(num_cpus=0)(EchoService)

    @ray.remote(num_cpus=0)
    class CallerActor:
        """A caller process for the fan-in measure."""

        def warm(self, target):
            ray.get(target.ping.remote())
            return os.getpid()

        def run(self, target, max_calls, max_seconds):
            return call_loop(lambda: ray.get(target.ping.remote()),
                             Budget(max_calls, max_seconds))

    return EchoActor, CallerActor


class RayPeer(Peer):
    name = "ray"
    supports = frozenset({"tiny_sync", "inflight", "fanin", "array", "launch", "idle_rss"})

    def __init__(self, num_cpus: int = 2):
        self.num_cpus = num_cpus
        self.ray = None
        self.actor = None
        self.init_seconds = None

    def start(self) -> None:
        import ray

        self.ray = ray
        # Workers import this package's modules; they inherit the driver's
        # environment through the raylet (cheaper than a runtime_env).
        os.environ["PYTHONPATH"] = procs.child_env()["PYTHONPATH"]
        t0 = time.perf_counter()
        ray.init(num_cpus=self.num_cpus, include_dashboard=False, log_to_driver=False)
        self.init_seconds = time.perf_counter() - t0
        self.EchoActor, self.CallerActor = _make_classes(ray)
        self.actor = self.EchoActor.remote()
        ray.get(self.actor.ping.remote(), timeout=120)

    def stop(self) -> None:
        if self.ray is not None:
            self.ray.shutdown()
            self.ray = None
            self.actor = None

    def call(self, method, *args):
        return self.ray.get(getattr(self.actor, method).remote(*args))

    def inflight(self, method, args, depth, budget):
        ray = self.ray
        m = getattr(self.actor, method)
        perf = time.perf_counter
        t0 = perf()
        deadline = t0 + budget.max_seconds
        pending = deque(m.remote(*args) for _ in range(depth))
        issued, done = depth, 0
        while pending:
            ray.get(pending.popleft())
            done += 1
            if issued < budget.max_calls and perf() < deadline:
                pending.append(m.remote(*args))
                issued += 1
        return done, perf() - t0

    def server_pid(self):
        return self.call("pid")

    def fanin(self, callers, budget, reps, warmup=1):
        """``callers`` caller actors (separate processes) call one actor."""
        ray = self.ray
        actors = [self.CallerActor.remote() for _ in range(callers)]
        try:
            ray.get([a.warm.remote(self.actor) for a in actors], timeout=300)
            rates = []
            for i in range(warmup + reps):
                out = ray.get(
                    [a.run.remote(self.actor, budget.max_calls, budget.max_seconds) for a in actors],
                    timeout=budget.max_seconds + 120,
                )
                if i >= warmup:
                    rates.append(sum(n / dt for n, dt in out))
            return rates
        finally:
            for a in actors:
                ray.kill(a)
            self._wait_workers_gone(len(actors))

    def launch(self, n: int, timeout: float) -> float:
        """Seconds from creating ``n`` actors to all of them answering ``ping``."""
        ray = self.ray
        t0 = time.perf_counter()
        actors = [self.EchoActor.remote() for _ in range(n)]
        try:
            ray.get([a.ping.remote() for a in actors], timeout=timeout)
            return time.perf_counter() - t0
        finally:
            for a in actors:
                ray.kill(a)
            self._wait_workers_gone(n)

    def _wait_workers_gone(self, n: int, timeout: float = 60.0) -> None:
        """Waits until killed actor processes have exited (bounded)."""
        names = ("ray::EchoActor", "ray::CallerActor")
        me = os.getpid()
        deadline = time.monotonic() + timeout
        keep = {self.server_pid()}
        while time.monotonic() < deadline:
            alive = 0
            for pid in procs.descendants(me):
                if pid in keep:
                    continue
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        cmd = f.read()
                except OSError:
                    continue
                if any(name.encode() in cmd for name in names):
                    alive += 1
            if not alive:
                return
            time.sleep(0.1)

    def cluster_processes(self) -> list[tuple[int, str, int | None]]:
        """(pid, name, rss) of every process the Ray driver started."""
        out = []
        for pid in procs.descendants(os.getpid()):
            try:
                with open(f"/proc/{pid}/comm") as f:
                    name = f.read().strip()
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().split(b"\0")[0].decode(errors="replace")
            except OSError:
                continue
            if cmd.startswith("ray::"):
                name = cmd
            out.append((pid, name, procs.rss_bytes(pid)))
        return out
