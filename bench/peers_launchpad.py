"""launchpad_py's courier as a benchmark peer.

The server is a ``CourierNode`` launched with ``local_mp`` (its own process,
as in a real program); the benchmark process is the caller. ``launchpad``
lets the client pick its path (the same-host socket here); ``launchpad_grpc``
and ``launchpad_tcp`` force gRPC and the raw-TCP path, the cross-host paths
(authenticated with the program's secret, as between hosts).
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time

from . import procs
from .harness import Budget, call_loop
from .peer import EchoService, Peer, fifo_inflight

BATCH = 16


class BatchedEchoService(EchoService):
    """``EchoService`` plus ``echo`` through a batched handler (16 callers, 2 ms timeout)."""

    def __init__(self):
        import launchpad_py as lp
        self.echo_batched = lp.batched_handler(BATCH, timeout=0.002)(lambda x: x)

    def frame_loop(self) -> str:
        """The courier frame loop this server's connections run: 'compiled' or 'pure'."""
        from launchpad_py.courier import frame_loop
        return frame_loop.active()


NAMES = {'auto': 'launchpad', 'grpc': 'launchpad_grpc', 'tcp': 'launchpad_tcp'}
# The courier's pure-Python frame loop, not the compiled one (courier/frame_loop.py).
PURE_ENV = {'LP_COURIER_PURE': '1'}


def connect(address: str, transport: str = 'auto', secret: bytes | None = None, tls=None,
            pure: bool = False):
    if pure:  # A fan-in caller process: every connection it opens runs pure Python.
        os.environ.update(PURE_ENV)
    return _Caller(address, transport, secret, tls)


class _Caller:
    """The fan-in caller: ``call``/``close`` over a courier client."""

    def __init__(self, address: str, transport: str, secret: bytes | None, tls):
        from launchpad_py import courier
        self._client = courier.Client(address, transport=transport, secret=secret, tls=tls)

    def call(self, method, *args):
        return self._client.call(method, *args)

    def close(self):
        pass


class LaunchpadPeer(Peer):
    supports = frozenset({'tiny_sync', 'inflight', 'fanin', 'array', 'launch', 'idle_rss'})

    def __init__(self, transport: str = 'auto', tls: bool = False, pure: bool = False):
        self.transport = transport
        self.name = NAMES[transport] + ('_tls' if tls else '') + ('_pure' if pure else '')
        self.tls = tls
        self.pure = pure  # Server and caller on the pure-Python frame loop.
        self.credentials = None
        self.controller = None
        self.client = None

    def start(self) -> None:
        import launchpad_py as lp
        from launchpad_py import courier
        program = lp.Program('bench')
        server_kwargs = {'thread_pool_size': 2 * BATCH}
        if self.tls:
            self.credentials = server_kwargs['tls'] = courier.TlsCredentials.generate()
        handle = program.add_node(lp.CourierNode(BatchedEchoService, courier_kwargs=server_kwargs),
                                  label='echo')
        resources = {'echo': lp.PythonProcess(env=PURE_ENV)} if self.pure else None
        self.controller = _quiet_launch(program, resources)
        self.client = courier.Client(handle.dereference().address, transport=self.transport,
                                     tls=self.credentials)
        if self.pure:  # Connections choose their loop when they open: open both kinds now.
            saved = os.environ.get('LP_COURIER_PURE')
            os.environ.update(PURE_ENV)
            try:
                assert self.client.call('frame_loop') == 'pure'
                self.client.futures.ping().result(timeout=60)
            finally:
                os.environ.pop('LP_COURIER_PURE')
                if saved is not None:
                    os.environ['LP_COURIER_PURE'] = saved

    def stop(self) -> None:
        if self.controller is not None:
            self.controller.stop()
            self.controller = None

    def call(self, method, *args):
        return self.client.call(method, *args)

    def inflight(self, method, args, depth, budget):
        futures = self.client.futures
        return fifo_inflight(lambda: getattr(futures, method)(*args), lambda f: f.result(),
                             depth, budget)

    def server_pid(self):
        return self.client.pid()

    def fanin_spec(self):
        from launchpad_py import courier
        # Fan-in callers are processes outside the program: they are handed the secret.
        return (__name__, 'connect', {'address': self.client.address,
                                      'transport': self.transport,
                                      'secret': courier.auth.secret_for(self.client.address),
                                      'tls': self.credentials, 'pure': self.pure})

    def batched(self, callers: int, method: str, budget: Budget) -> float:
        """Total calls/s of ``callers`` threads each calling ``method`` synchronously."""
        start = threading.Barrier(callers)

        def run(_):
            start.wait(timeout=60)
            return call_loop(lambda: self.client.call(method, 1), budget)

        with concurrent.futures.ThreadPoolExecutor(callers) as pool:
            results = list(pool.map(run, range(callers)))
        return sum(n / dt for n, dt in results)

    def launch(self, n: int, timeout: float) -> float:
        """Seconds from ``lp.launch`` of ``n`` courier nodes to each answering one call."""
        import launchpad_py as lp
        program = lp.Program(f'bench{n}')
        handles = [program.add_node(lp.CourierNode(EchoService), label='echo') for _ in range(n)]
        t0 = time.perf_counter()
        controller = _quiet_launch(program)
        try:
            for handle in handles:
                handle.dereference().ping()
            elapsed = time.perf_counter() - t0
            self.last_program_rss = [procs.rss_bytes(s.pid) for s in controller.statuses()
                                     if s.pid is not None]
            return elapsed
        finally:
            controller.stop()

    def program_rss(self, n: int = 10) -> list[int]:
        """RSS of every node process of an idle ``n``-node program (whole tree)."""
        self.launch(n, 300)
        return [r for r in self.last_program_rss if r]


def _quiet_launch(program, resources=None):
    """``local_mp`` with node output in files; the list of log paths is not printed."""
    import contextlib
    import io

    import launchpad_py as lp
    with contextlib.redirect_stdout(io.StringIO()):
        return lp.launch(program, launch_type='local_mp', terminal='output_to_files',
                         resources=resources)
