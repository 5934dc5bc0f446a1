"""Raw grpcio peer: one generic unary-unary method, raw bytes, no codegen.

The request is the :mod:`.wire` frame of ``(method, args)`` joined into one
``bytes`` (pickle protocol 5; out-of-band buffers appended after the pickle,
which is the one copy gRPC needs to get a single message); the response is
the frame of the result.  Decoding is zero-copy over the received bytes, so
returned arrays are read-only views.

Run as a server: ``python -m bench.peers_grpc --serve 127.0.0.1:0``.
"""

from __future__ import annotations

import argparse
import threading

from . import procs, wire
from .peer import EchoService, ProcessPeer, fifo_inflight

SERVICE = "lp_bench.Echo"
METHOD = f"/{SERVICE}/Call"
OPTIONS = [
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
]


def available() -> tuple[bool, str]:
    try:
        import grpc  # noqa: F401
    except ImportError:
        return False, "grpcio not installed (pip install grpcio)"
    return True, ""


def serve(address: str, workers: int = 16) -> None:
    from concurrent import futures

    import grpc

    host = address.rpartition(":")[0]
    if host not in ("127.0.0.1", "localhost"):
        raise SystemExit("the gRPC bench server binds loopback only")
    service = EchoService()

    def handle(request: bytes, context) -> bytes:
        method, args = wire.decode_bytes(request)
        try:
            reply = (True, getattr(service, method)(*args))
        except Exception as e:  # noqa: BLE001 - sent back to the caller
            reply = (False, repr(e))
        return wire.encode_bytes(reply)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers), options=OPTIONS)
    handler = grpc.method_handlers_generic_handler(
        SERVICE, {"Call": grpc.unary_unary_rpc_method_handler(handle)}
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port(address)
    if not port:
        raise SystemExit(f"could not bind {address}")
    server.start()
    done = threading.Event()
    procs.exit_when_stdin_closes(cleanup=lambda: server.stop(0))
    procs.announce_ready(f"{host}:{port}")
    done.wait()


class RemoteError(RuntimeError):
    pass


def _unwrap(payload: bytes):
    ok, result = wire.decode_bytes(payload)
    if not ok:
        raise RemoteError(result)
    return result


class GrpcClient:
    def __init__(self, address: str, ready_timeout: float = 30.0):
        import grpc

        self.channel = grpc.insecure_channel(address, options=OPTIONS)
        grpc.channel_ready_future(self.channel).result(timeout=ready_timeout)
        # No serializers: request and response are raw bytes.
        self.stub = self.channel.unary_unary(METHOD)

    def call(self, method: str, *args):
        return _unwrap(self.stub(wire.encode_bytes((method, args))))

    def future(self, method: str, *args):
        return self.stub.future(wire.encode_bytes((method, args)))

    def close(self) -> None:
        self.channel.close()


def connect(address: str) -> GrpcClient:
    return GrpcClient(address)


class GrpcPeer(ProcessPeer):
    """Sync calls use ``stub(...)``; calls in flight use ``stub.future(...)``."""

    name = "grpc"
    supports = frozenset({"tiny_sync", "inflight", "fanin", "array", "idle_rss"})
    module = "peers_grpc"

    def server_args(self) -> list[str]:
        return ["127.0.0.1:0"]

    def connect(self, address: str):
        return GrpcClient(address)

    def inflight(self, method, args, depth, budget):
        return fifo_inflight(
            lambda: self.client.future(method, *args),
            lambda f: _unwrap(f.result()),
            depth,
            budget,
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve", required=True, help="127.0.0.1:PORT (0 picks one)")
    serve(ap.parse_args().serve)


if __name__ == "__main__":
    main()
