"""What a courier transport provides, and what the server and client hand it.

A transport (one entry of ``registry.py``) is:

* ``listen(serving) -> Listener | None``: bind its listener for one server
  (None when it does not apply: no loopback address, turned off, no private
  socket directory); the listener accepts from ``start()`` until ``stop()``;
* ``dial(dial) -> channel | None``: a channel to the server at
  ``dial.address`` (None when this transport cannot reach it from here);
* its address: how a client finds the listener from the server's address
  (the address names the gRPC port; the Unix socket's path is derived from
  it; the raw-TCP port is asked over gRPC);
* its handshake, which proves the program's key for that server before
  anything is decoded (``auth.py``; each transport's own module says how).

A socket channel (Unix socket, raw TCP) answers ``call(request, timeout,
decode)`` and ``call_future(...)``, returning ``sockets.socket_channel.NO_SOCKET``
when the server turns out to have no such listener; the gRPC caller answers
``call(request, decode)``, ``call_future(...)`` and ``list_methods()``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from typing import Any, Callable, Protocol

from launchpad_py.courier import auth

#: How long a gRPC connection may go without a call before the server closes it.
IDLE_SECONDS = 60.0


@dataclasses.dataclass(frozen=True)
class ServerOptions:
    """A server's settings that its listeners read (see ``courier.Server``)."""

    local_transport: bool
    tcp_transport: bool
    tls: Any  # tls.TlsCredentials | None
    handshake_timeout: float
    idle_timeout: float
    max_frame_bytes: int
    max_message_bytes: int


@dataclasses.dataclass
class Serving:
    """What a server hands each listener: how to run a call, and who it is.

    ``port`` is the port the server's address names: the one asked for (0:
    any) until the address's transport binds it.
    """

    host: str
    port: int
    label: str | None
    identity: auth.Identity
    secret: bytes | None
    dispatch: Callable  # (frame, shard=None) -> ('ok', value) | ('error', failure)
    unsendable: Callable  # (frame, exc) -> the reply saying why a result cannot travel
    pool: concurrent.futures.Executor
    initializer: Callable[[], None] | None
    stats: Any  # stats.ServerStats
    methods: Callable[[], list[str]]  # The public methods, for ListMethods.
    tcp_port: Callable[[], int]  # The raw-TCP port (0: none), for Endpoints.
    options: ServerOptions


@dataclasses.dataclass(frozen=True)
class Dial:
    """What a client hands a transport to reach one server."""

    address: str
    secret: bytes | None
    timeout: float | None
    wait_for_ready: bool
    tls: Any  # tls.TlsCredentials | None
    expected: str | None  # The name the server must prove; None for any.
    max_message_bytes: int


class Listener(Protocol):
    """One server's listener on one transport."""

    port: int | None

    def start(self) -> None:
        """Accept connections from now on."""

    def stop(self, grace: float | None = None) -> None:
        """Close the listener and its connections (calls in flight get ``grace`` seconds,
        where the transport can wait)."""


@dataclasses.dataclass(frozen=True)
class Transport:
    """One way to reach a courier server (see the module docstring)."""

    name: str
    address: str  # How a client finds this listener, in words.
    listen: Callable[[Serving], Listener | None]
    dial: Callable[[Dial], Any]
    choices: tuple[str, ...]  # The Client(transport=...) values that may use it.
    #: Closes this process's cached channels to the server at (host, port), which stopped:
    #: a channel's reader sleeps while no call is pending and would never see it go.
    forget: Callable[[str, int], None] = lambda host, port: None
