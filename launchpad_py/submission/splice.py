"""Copying bytes both ways between two connected sockets until either side ends.

The dashboard relay (``dashboard_relay`` here, ``endpoint`` in the pod) is two
sockets joined: an HTTP request one way, the page back the other. When one
side closes, the other is shut down too, so neither thread waits forever.

    splice(browser_socket, endpoint_socket)   # returns once both directions ended
"""

from __future__ import annotations

import socket
import threading

_CHUNK = 64 * 1024


def _copy(source: socket.socket, sink: socket.socket) -> None:
    try:
        while True:
            data = source.recv(_CHUNK)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass  # Either end went away: the shutdowns below end the other direction.
    for sock, how in ((sink, socket.SHUT_WR), (source, socket.SHUT_RD)):
        try:
            sock.shutdown(how)
        except OSError:
            pass


def splice(one: socket.socket, other: socket.socket) -> None:
    """Copies ``one`` to ``other`` and back until both directions end; closes both."""
    for sock in (one, other):
        sock.settimeout(None)
    back = threading.Thread(target=_copy, args=(other, one), name='lp-splice', daemon=True)
    back.start()
    try:
        _copy(one, other)
        back.join()
    finally:
        one.close()
        other.close()
