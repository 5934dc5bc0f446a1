"""What an attacker without the program secret can do with the proofs it sees.

Each part here holds no secret. ``GrpcRelay`` sits where a caller dials (a
dead node's port, or a path between hosts): it passes calls on to another
server and keeps every ``lp-*`` proof and body it saw. ``spend`` sends a seen
proof to any server with any body. ``TcpRelay`` passes a raw-TCP handshake
between a caller and another server, then uses the connection it won.
``Target`` counts its calls; ``bomb_request`` is a request whose unpickling
creates a file, so the file's absence proves nothing was decoded.

Run as a program, it is the false server of a killed node on that node's host,
as another user (see ``false_server``).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import pickle
import socket
import sys
import threading
import time

import grpc

from launchpad_py.courier import frames, messages


class Bomb:
    """Unpickling this creates ``path`` (where the attacker's code would run)."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return open, (self.path, 'w')


class Target:
    """A node's object: counts the calls that reached it."""

    def __init__(self):
        self.count = 0

    def mark(self, *args) -> int:
        self.count += 1
        return self.count

    def calls(self) -> int:
        return self.count


def bomb_request(path: str) -> bytes:
    """A gRPC ``Call`` body whose unpickling creates ``path``."""
    return b''.join(frames.encode(0, frames.REQUEST, ('mark', (Bomb(path),), {}))[0])


def bomb_frame(path: str) -> bytes:
    """A raw-TCP request frame whose unpickling creates ``path``."""
    pickled = pickle.dumps(('mark', (Bomb(path),), {}), protocol=5)
    return frames.HEADER.pack(1, 1, 0, 0, len(pickled), 0, 0) + pickled


def _channel(address: str, tls) -> grpc.Channel:
    if tls is None:
        return grpc.insecure_channel(address)
    from launchpad_py.courier.transports.tls import GRPC_CHANNEL_OPTIONS
    return grpc.secure_channel(address, tls.grpc_channel_credentials(),
                               options=GRPC_CHANNEL_OPTIONS)


def spend(address: str, metadata, body: bytes, tls=None, method: str = messages.CALL) -> bool:
    """Sends ``body`` with a seen proof to ``address``; True when the server took it."""
    channel = _channel(address, tls)
    try:
        channel.unary_unary(method)(body, metadata=metadata, timeout=10)
        return True
    except grpc.RpcError:
        return False
    finally:
        channel.close()


class GrpcRelay(grpc.GenericRpcHandler):
    """A gRPC server at ``host:port`` passing every call on to ``target``, keeping what it saw.

    ``seen``: ``(method, lp-* metadata, request bytes)`` per call. ``answer(method,
    reply)`` may change replies on their way back; ``only`` limits what is passed on
    (others are answered UNAVAILABLE, once seen: a false server collecting proofs).
    """

    def __init__(self, target: str, *, port: int = 0, host: str = '127.0.0.1', tls=None,
                 answer=None, only: tuple[str, ...] | None = None):
        self.seen: list[tuple[str, tuple, bytes]] = []
        self._channel = _channel(target, tls)
        self._answer = answer or (lambda method, reply: reply)
        self._only = only
        self._server = grpc.server(concurrent.futures.ThreadPoolExecutor(4),
                                   options=[('grpc.so_reuseport', 0)])
        self._server.add_generic_rpc_handlers([self])
        where = f'{host}:{port}'
        try:
            self.port = (self._server.add_insecure_port(where) if tls is None else
                         self._server.add_secure_port(where, tls.grpc_server_credentials()))
        except RuntimeError:  # The port is taken.
            self._channel.close()
            raise
        self.address = f'{host}:{self.port}'
        self._server.start()

    def service(self, details):
        method = details.method
        metadata = tuple((k, v) for k, v in details.invocation_metadata if k.startswith('lp-'))

        def relay(requests, context):
            body = b''.join(requests)
            self.seen.append((method, metadata, body))
            if self._only is not None and method not in self._only:
                context.abort(grpc.StatusCode.UNAVAILABLE, 'gone')
            call = self._channel.stream_stream(method)(iter([body]), metadata=metadata,
                                                        timeout=10)
            try:
                context.send_initial_metadata(
                    [(k, v) for k, v in call.initial_metadata() if k.startswith('lp-')])
                for reply in call:
                    yield self._answer(method, reply)
            except grpc.RpcError as exc:
                context.abort(exc.code(), exc.details() or '')

        return grpc.stream_stream_rpc_method_handler(relay)

    def calls_seen(self, method: str = messages.CALL) -> list[tuple[tuple, bytes]]:
        return [(metadata, body) for m, metadata, body in self.seen if m == method]

    def close(self) -> None:
        self._server.stop(None).wait()
        self._channel.close()

    def __enter__(self) -> 'GrpcRelay':
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class TcpRelay:
    """Passes a raw-TCP handshake between the first caller and ``target``'s TCP port, then
    sends ``injected`` on the connection the caller's proof opened to ``target``. With ``tls``
    (the program's credentials) it ends TLS on both sides and passes the plain bytes."""

    def __init__(self, target: tuple[str, int], injected: bytes, tls=None):
        self._target = target
        self._tls = tls
        self._injected = injected
        self._listener = socket.create_server(('127.0.0.1', 0))
        self.port = self._listener.getsockname()[1]
        self.relayed = threading.Event()  # Set once the caller's proof reached the target.
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            caller, _ = self._listener.accept()
        except OSError:
            return
        server = socket.create_connection(self._target, timeout=10)
        caller.settimeout(10)
        try:
            if self._tls is not None:
                caller = self._tls.server_context().wrap_socket(caller, server_side=True)
                server = self._tls.client_context().wrap_socket(server, server_hostname=None)
            caller.sendall(server.recv(4096))   # The server's greeting, to the caller.
            proof = caller.recv(4096)
            if proof:  # The caller's proof, to the server.
                server.sendall(proof)
            answer = proof and server.recv(4096)
            if answer:
                self.relayed.set()
                caller.sendall(answer)
                server.sendall(self._injected)
                server.recv(4096)  # The reply, if the injected request ran.
        except OSError:
            pass
        finally:
            caller.close()
            server.close()

    def close(self) -> None:
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # Wakes an accept() nobody answered.
        except OSError:
            pass
        self._listener.close()
        self._thread.join(30)


def bomb_path(directory) -> str:
    return os.path.join(str(directory), 'attacker-code-ran')


def false_server(host: str, port: int, target: str, seconds: float = 60.0) -> None:
    """Binds ``host:port`` as soon as it is free (a killed node's port, polled as an attacker
    would), answers ``Endpoints`` from ``target`` and passes nothing else on; prints
    ``ready as uid N``, then, once stdin closes, each call it saw as a JSON line
    ``[method, [[key, value], ...], body hex]``.

    Its first line of stdin is empty, or the program's TLS certificate and key (PEM, hex,
    space-separated): the strongest attacker, who holds those but not the secret.
    """
    from launchpad_py.courier import TlsCredentials
    pem = sys.stdin.readline().split()
    tls = TlsCredentials(*map(bytes.fromhex, pem)) if pem else None
    deadline = time.monotonic() + seconds
    while True:
        try:
            relay = GrpcRelay(target, host=host, port=port, tls=tls, only=(messages.ENDPOINTS,))
            break
        except RuntimeError:  # Still held by the dying node's sockets.
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
    print(f'ready as uid {os.getuid()}', flush=True)
    sys.stdin.read()
    relay.close()
    for method, metadata, body in relay.seen:
        print(json.dumps([method, [list(item) for item in metadata], body.hex()]), flush=True)


if __name__ == '__main__':
    # python tests/attackers.py false-server HOST PORT TARGET
    if sys.argv[1:2] != ['false-server'] or len(sys.argv) != 5:
        sys.exit('usage: attackers.py false-server HOST PORT TARGET')
    false_server(sys.argv[2], int(sys.argv[3]), sys.argv[4])
