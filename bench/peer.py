"""The interface every benchmarked peer implements, and the generic fan-in.

A peer adapter (floor, gRPC, Ray, later launchpad_py's courier) subclasses
:class:`Peer`.  ``bench.run`` only talks to this interface, so adding a peer
is adding one adapter and one entry in ``bench.run.PEERS``.

Every adapter serves the same tiny service: ``echo(x) -> x``, ``ping()`` and
``pid() -> server pid``.
"""

from __future__ import annotations

import importlib
import multiprocessing
import time
from collections import deque

from . import procs
from .harness import Budget, call_loop


class EchoService:
    """The object every server exposes."""

    def echo(self, x):
        return x

    def ping(self):
        return None

    def pid(self):
        import os

        return os.getpid()


class Peer:
    """Base class of a benchmarked peer."""

    name = "peer"
    # Measures this peer takes part in (see bench.run).
    supports: frozenset = frozenset()

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def inflight(self, method: str, args: tuple, depth: int, budget: Budget) -> tuple[int, float]:
        """Keeps ``depth`` calls outstanding; returns (completed calls, seconds)."""
        raise NotImplementedError

    def server_pid(self) -> int | None:
        return None

    def call(self, method: str, *args):
        """One synchronous call."""
        return self.client.call(method, *args)

    # -- fan-in: several caller processes against one server -----------------
    def fanin_spec(self):
        """(module, function, kwargs) a caller process uses to connect, or None.

        ``module.function(**kwargs)`` must return a client with ``call`` and
        ``close`` methods.
        """
        return None

    def fanin(self, callers: int, budget: Budget, reps: int, warmup: int = 1) -> list[float]:
        """Total calls/s of ``callers`` processes each calling ``ping``."""
        spec = self.fanin_spec()
        if spec is None:
            raise NotImplementedError
        return fanin_processes(spec, callers, budget, reps, warmup)


class ProcessPeer(Peer):
    """A peer whose server is ``python -m bench.<module> --serve ARGS`` (see procs)."""

    module = ""
    server = None
    client = None

    def server_args(self) -> list[str]:
        raise NotImplementedError

    def connect(self, address: str):
        raise NotImplementedError

    def start(self) -> None:
        self.server = procs.start_server(self.module, self.server_args())
        self.client = self.connect(self.server.address)

    def stop(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
        if self.server is not None:
            self.server.stop()
            self.server = None

    def server_pid(self):
        return self.server.pid

    def fanin_spec(self):
        return (type(self).__module__, "connect", {"address": self.server.address})


def _fanin_worker(conn, spec) -> None:
    from .cpu import self_usage

    module, func, kwargs = spec
    client = getattr(importlib.import_module(module), func)(**kwargs)
    try:
        client.call("ping")
        conn.send("ready")
        while conn.poll(600):
            msg = conn.recv()
            if msg[0] != "run":
                break
            _, max_calls, max_seconds = msg
            before = self_usage()
            n, dt = call_loop(lambda: client.call("ping"), Budget(max_calls, max_seconds))
            conn.send((n, dt, self_usage() - before))
    finally:
        client.close()
        conn.close()


class FaninPool:
    """``callers`` spawned caller processes of one server, kept for several reps.

    ``rep(budget)`` runs them together and returns (total calls/s, calls,
    the callers' CPU :class:`bench.cpu.Usage` over their timed loops).
    """

    def __init__(self, spec, callers: int, start_timeout: float = 60.0):
        ctx = multiprocessing.get_context("spawn")
        self.procs, self.conns = [], []
        try:
            for _ in range(callers):
                parent, child = ctx.Pipe()
                p = ctx.Process(target=_fanin_worker, args=(child, spec), daemon=True)
                p.start()
                child.close()
                self.procs.append(p)
                self.conns.append(parent)
            for c in self.conns:
                if not c.poll(start_timeout):
                    raise RuntimeError("fan-in caller did not start")
                assert c.recv() == "ready"
        except BaseException:
            self.close()
            raise

    def rep(self, budget: Budget):
        from .cpu import Usage

        for c in self.conns:
            c.send(("run", budget.max_calls, budget.max_seconds))
        rate, calls, usage = 0.0, 0, Usage()
        for c in self.conns:
            if not c.poll(budget.max_seconds + 60):
                raise RuntimeError("fan-in caller did not answer")
            n, dt, used = c.recv()
            rate, calls, usage = rate + n / dt, calls + n, usage + used
        return rate, calls, usage

    def close(self) -> None:
        for c in self.conns:
            try:
                c.send(("stop",))
            except OSError:
                pass
        for p in self.procs:
            p.join(10)
            if p.is_alive():
                p.terminate()
                p.join(5)
        for c in self.conns:
            c.close()


def fanin_processes(spec, callers: int, budget: Budget, reps: int, warmup: int = 1,
                    start_timeout: float = 60.0) -> list[float]:
    """Starts ``callers`` spawned processes; each rep runs them together."""
    pool = FaninPool(spec, callers, start_timeout)
    try:
        return [pool.rep(budget)[0] for i in range(warmup + reps)][warmup:]
    finally:
        pool.close()


def fifo_inflight(submit, wait, depth: int, budget: Budget) -> tuple[int, float]:
    """Generic "depth calls in flight" loop over submit()/wait(handle)."""
    perf = time.perf_counter
    t0 = perf()
    deadline = t0 + budget.max_seconds
    pending = deque(submit() for _ in range(depth))
    done = 0
    issued = depth
    while pending:
        wait(pending.popleft())
        done += 1
        if issued < budget.max_calls and perf() < deadline:
            pending.append(submit())
            issued += 1
    return done, perf() - t0
