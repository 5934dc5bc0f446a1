"""``pods/{name}/portforward`` of the fake API server: the websocket ``kubectl port-forward`` and
the Python client's ``kubernetes.stream.portforward`` speak (subprotocol v4.channel.k8s.io).

After the HTTP upgrade, every message is a binary websocket frame whose first
byte is a channel: per forwarded port, ``2*i`` carries data both ways and
``2*i + 1`` errors from the server. The first frame the server sends on each
of them is the port number (two bytes, little endian). The fake forwards one
port per connection, to the pod's loopback (in its node's network namespace,
as a kubelet does), and ends the websocket when either side ends.

    handler is upgraded by serve(handler, kubelet, namespace, pod, query)
"""

from __future__ import annotations

import base64
import hashlib
import socket
import struct
import threading

from fake_kube.store import ApiError

_GUID = b'258EAFA5-E914-47DA-95CA-C5AB0DC85B11'  # RFC 6455's fixed key suffix.
PROTOCOL = 'v4.channel.k8s.io'
_BINARY, _CLOSE, _PING, _PONG = 0x2, 0x8, 0x9, 0xA


def _frame(opcode: int, payload: bytes) -> bytes:
    """A final, unmasked frame (servers never mask)."""
    size = len(payload)
    if size < 126:
        head = struct.pack('!BB', 0x80 | opcode, size)
    elif size < 1 << 16:
        head = struct.pack('!BBH', 0x80 | opcode, 126, size)
    else:
        head = struct.pack('!BBQ', 0x80 | opcode, 127, size)
    return head + payload


def _read_frame(rfile) -> tuple[int, bytes]:
    """(opcode, payload) of the client's next frame; (_CLOSE, b'') at the end of the stream."""
    head = rfile.read(2)
    if len(head) < 2:
        return _CLOSE, b''
    opcode, size = head[0] & 0x0F, head[1] & 0x7F
    if size >= 126:
        wide = rfile.read(2 if size == 126 else 8)
        size = struct.unpack('!H' if size == 126 else '!Q', wide)[0]
    mask = rfile.read(4) if head[1] & 0x80 else b'\0\0\0\0'
    data = rfile.read(size)
    return opcode, bytes(b ^ mask[i % 4] for i, b in enumerate(data))


def _accept(handler, protocols: str) -> None:
    if PROTOCOL not in [p.strip() for p in protocols.split(',')]:
        raise ApiError(400, 'BadRequest', f'the fake speaks only {PROTOCOL} (offered: {protocols})')
    key = handler.headers.get('Sec-WebSocket-Key', '').encode()
    handler.send_response(101, 'Switching Protocols')
    handler.send_header('Upgrade', 'websocket')
    handler.send_header('Connection', 'Upgrade')
    handler.send_header('Sec-WebSocket-Accept',
                        base64.b64encode(hashlib.sha1(key + _GUID).digest()).decode())
    handler.send_header('Sec-WebSocket-Protocol', PROTOCOL)
    handler.end_headers()
    handler.wfile.flush()


def serve(handler, kubelet, namespace: str, pod: str, query: dict) -> None:
    """Upgrades ``handler``'s connection and forwards it to the pod's port until either ends."""
    ports = query.get('ports', '')
    if not ports.isdigit():
        raise ApiError(400, 'BadRequest', f'the fake forwards exactly one port (got {ports!r})')
    port = int(ports)
    handler.server.forwarded.append((namespace, pod, port))
    _accept(handler, handler.headers.get('Sec-WebSocket-Protocol', ''))
    handler.close_connection = True
    sending = threading.Lock()

    def send(opcode: int, payload: bytes) -> None:
        with sending:
            handler.connection.sendall(_frame(opcode, payload))

    number = struct.pack('<H', port)
    send(_BINARY, b'\0' + number)
    send(_BINARY, b'\1' + number)
    try:
        target = kubelet.connect(namespace, pod, port)
    except (OSError, ApiError) as exc:  # After the upgrade: an HTTP error would be garbage.
        send(_BINARY, b'\1' + f'error forwarding port {port} to pod {pod}: {exc}'.encode())
        send(_CLOSE, b'')
        return
    threading.Thread(target=_pod_to_client, args=(target, send), name='fake-kube-forward',
                     daemon=True).start()
    try:
        while True:
            opcode, payload = _read_frame(handler.rfile)
            if opcode == _CLOSE:
                break
            if opcode == _PING:
                send(_PONG, payload)
            elif opcode == _BINARY and payload[:1] == b'\0' and len(payload) > 1:
                target.sendall(payload[1:])
    except OSError:
        pass
    finally:
        # Shut down first: close() alone sends no FIN while _pod_to_client is still in recv
        # on this socket, and the pod would not see the client go.
        try:
            target.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        target.close()


def _pod_to_client(target, send) -> None:
    try:
        while data := target.recv(64 * 1024):
            send(_BINARY, b'\0' + data)
        send(_CLOSE, b'')  # The pod's side ended: so does the forward, as on a real cluster.
    except OSError:
        pass
