"""The floor: a raw socket server in its own process, plus the memcpy ceiling.

Requests are ``(call_id, method, args)`` and responses ``(call_id, ok,
result)``, framed by :mod:`.wire` (pickle protocol 5, out-of-band buffers,
``sendmsg`` out, ``recv_into`` preallocated ``bytearray`` in).  The server
runs one thread per connection and answers in order, so a client can
pipeline requests on one socket.

Run as a server: ``python -m bench.peers_floor --serve unix:/path/sock``
or ``--serve tcp:127.0.0.1:0`` (prints ``READY <address>``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import tempfile
import threading
import time

from . import procs, wire
from .harness import Budget, call_loop
from .peer import EchoService, ProcessPeer

# Larger kernel socket buffers mean fewer wakeups per large message; small
# messages are unaffected.  The kernel doubles the value (and caps it at
# net.core.{w,r}mem_max).  1 MiB measured best here for 64 MiB transfers.
SOCK_BUF = 1024 * 1024


def _tune(sock: socket.socket) -> None:
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, SOCK_BUF)
        except OSError:
            pass
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _parse(address: str):
    scheme, _, rest = address.partition(":")
    if scheme == "unix":
        return socket.AF_UNIX, rest
    if scheme == "tcp":
        host, _, port = rest.rpartition(":")
        return socket.AF_INET, (host, int(port))
    raise ValueError(f"bad address {address!r}")


# --------------------------------------------------------------------------
# server
# --------------------------------------------------------------------------

def _serve_connection(conn: socket.socket, service) -> None:
    _tune(conn)
    reader = wire.FrameReader(conn)
    try:
        while True:
            try:
                call_id, method, args = reader.read()
            except (EOFError, ConnectionError):
                return
            try:
                reply = (call_id, True, getattr(service, method)(*args))
            except Exception as e:  # noqa: BLE001 - sent back to the caller
                reply = (call_id, False, repr(e))
            wire.send_obj(conn, reply)
    finally:
        conn.close()


def serve(address: str) -> None:
    family, addr = _parse(address)
    if family == socket.AF_INET and addr[0] not in ("127.0.0.1", "localhost"):
        raise SystemExit("the floor server binds loopback only")
    listener = socket.socket(family, socket.SOCK_STREAM)
    if family == socket.AF_INET:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(addr)
    listener.listen(128)
    if family == socket.AF_INET:
        bound = f"tcp:{listener.getsockname()[0]}:{listener.getsockname()[1]}"
    else:
        bound = address
    procs.exit_when_stdin_closes()
    procs.announce_ready(bound)
    service = EchoService()
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_serve_connection, args=(conn, service), daemon=True).start()


# --------------------------------------------------------------------------
# client
# --------------------------------------------------------------------------

class RemoteError(RuntimeError):
    pass


class FloorClient:
    def __init__(self, address: str, connect_timeout: float = 30.0):
        family, addr = _parse(address)
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        _tune(self.sock)
        self.sock.settimeout(connect_timeout)
        self.sock.connect(addr)
        self.sock.settimeout(None)
        self.reader = wire.FrameReader(self.sock)
        self._next_id = 0

    def call(self, method: str, *args):
        wire.send_obj(self.sock, (0, method, args))
        _, ok, result = self.reader.read()
        if not ok:
            raise RemoteError(result)
        return result

    def pipelined(self, method: str, args: tuple, depth: int, budget: Budget) -> tuple[int, float]:
        """Keeps ``depth`` requests in flight on this one socket."""
        perf = time.perf_counter
        sock, reader = self.sock, self.reader
        t0 = perf()
        deadline = t0 + budget.max_seconds
        issued = done = 0
        for _ in range(depth):
            wire.send_obj(sock, (issued, method, args))
            issued += 1
        while done < issued:
            call_id, ok, _ = reader.read()
            if call_id != done or not ok:
                raise RemoteError(f"out of order or failed reply {call_id} != {done}")
            done += 1
            if issued < budget.max_calls and perf() < deadline:
                wire.send_obj(sock, (issued, method, args))
                issued += 1
        return done, perf() - t0

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def connect(address: str) -> FloorClient:
    return FloorClient(address)


# --------------------------------------------------------------------------
# peer adapter
# --------------------------------------------------------------------------

class FloorPeer(ProcessPeer):
    supports = frozenset({"tiny_sync", "inflight", "fanin", "array", "launch", "idle_rss"})
    module = "peers_floor"

    def __init__(self, transport: str = "unix"):
        self.transport = transport
        self.name = f"floor_{transport}"
        if transport != "unix":  # process start-up does not depend on transport
            self.supports = self.supports - {"launch"}
        self._tmp = None
        self._count = 0

    def _server_arg(self) -> str:
        if self.transport == "unix":
            if self._tmp is None:
                self._tmp = tempfile.mkdtemp(prefix="lp_bench_")
            self._count += 1
            return f"unix:{os.path.join(self._tmp, 's%d' % self._count)}"
        return "tcp:127.0.0.1:0"

    def server_args(self) -> list[str]:
        return [self._server_arg()]

    def connect(self, address: str):
        return FloorClient(address)

    def stop(self) -> None:
        super().stop()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def inflight(self, method, args, depth, budget):
        return self.client.pipelined(method, args, depth, budget)

    def inflight_threads(self, method, args, threads: int, budget: Budget) -> tuple[int, float]:
        """``threads`` client threads, one connection each, sync calls."""
        clients = [FloorClient(self.server.address) for _ in range(threads)]
        counts = [0] * threads
        start = threading.Barrier(threads + 1)

        def work(i):
            c = clients[i]
            start.wait()
            counts[i] = call_loop(lambda: c.call(method, *args), budget)[0]

        ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        try:
            for t in ts:
                t.start()
            start.wait()
            t0 = time.perf_counter()
            for t in ts:
                t.join(budget.max_seconds + 60)
            return sum(counts), time.perf_counter() - t0
        finally:
            for c in clients:
                c.close()

    def launch(self, n: int, timeout: float) -> float:
        """Seconds from spawning ``n`` servers to each answering one call."""
        t0 = time.perf_counter()
        spawned = [procs.spawn_server("peers_floor", [self._server_arg()]) for _ in range(n)]
        servers = []
        try:
            for p in spawned:
                left = max(1.0, timeout - (time.perf_counter() - t0))
                servers.append(procs.wait_ready(p, left))
            for s in servers:
                c = FloorClient(s.address)
                c.call("ping")
                c.close()
            return time.perf_counter() - t0
        finally:
            for s in servers:
                s.stop()
            for p in spawned:
                if p.poll() is None:
                    p.kill()
                    p.wait()


# --------------------------------------------------------------------------
# memcpy ceiling
# --------------------------------------------------------------------------

def memcpy_rep(nbytes: int, budget: Budget):
    """A repetition function: seconds per ``np.copyto`` of ``nbytes`` (float32)."""
    import numpy as np

    src = np.ones(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # fault the destination pages in

    def rep():
        n, dt = call_loop(lambda: np.copyto(dst, src), budget)
        return dt / n

    return rep


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve", required=True, help="unix:/path or tcp:127.0.0.1:PORT")
    serve(ap.parse_args().serve)


if __name__ == "__main__":
    main()
