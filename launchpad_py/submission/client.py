"""Asking a submitted controller something over its TCP endpoint, with the program's secret.

    reply = ask(record, secret, ('statistics',))

Both sides prove the secret before anything else is read (the
``multiprocessing`` challenge, both ways), and replies are read as plain data
only: nothing the endpoint sends can run code here.
"""

from __future__ import annotations

import io
import json
import multiprocessing.connection as mpc
import pickle
import socket
import struct

from launchpad_py import errors


class NotReachableError(errors.LaunchpadError, ConnectionError):
    """The controller of a submitted program does not answer (not started yet, or gone)."""


class _PlainData(pickle.Unpickler):
    """Reads replies of dicts, lists, strings and numbers; refuses anything that names code."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f'the endpoint sent a {module}.{name}; only plain data is '
                                     'accepted')


def ask(endpoint_text: str | None, secret: bytes, request: tuple, timeout: float = 10.0):
    """The reply of the endpoint described by ``endpoint_text`` (endpoint.json's text)."""
    if not endpoint_text:
        raise NotReachableError('the controller has not opened its endpoint (yet)')
    where = json.loads(endpoint_text)
    address = (where['host'], int(where['port']))
    try:
        sock = socket.create_connection(address, timeout=timeout)
    except OSError as exc:
        raise NotReachableError(f'the controller at {address[0]}:{address[1]} does not answer '
                                f'({exc})') from None
    connection, value = converse(sock, secret, request, timeout, f'{address[0]}:{address[1]}')
    connection.close()
    return value


def converse(sock: socket.socket, secret: bytes, request: tuple, timeout: float,
             where: str) -> tuple[mpc.Connection, object]:
    """Proves the secret over the connected ``sock``, sends ``request``; the connection (still
    open, for a relay) and the reply. ``sock`` is taken over either way."""
    sock.settimeout(None)  # Blocking, with a receive timeout the Connection keeps.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                    struct.pack('ll', int(timeout), int(timeout % 1 * 1e6)))
    connection = mpc.Connection(sock.detach())
    try:
        mpc.answer_challenge(connection, secret)
        mpc.deliver_challenge(connection, secret)
        connection.send(request)
        _, value = _PlainData(io.BytesIO(connection.recv_bytes())).load()  # ('reply', value)
        return connection, value
    except (EOFError, OSError) as exc:
        connection.close()
        raise NotReachableError(f'the controller at {where} hung up '
                                f'({exc or type(exc).__name__})') from None
    except BaseException:
        connection.close()
        raise
