"""The transports, in one place: the server listens on each that applies, the client
picks the first that reaches its server.

To add a transport, write its ``listen`` and ``dial`` (see ``interface.py``) and
add its ``Transport`` here; ``courier.Server`` and ``courier.Client`` name none.
"""

from __future__ import annotations

from launchpad_py.courier.transports import (grpc_client, grpc_server, interface, tcp, uds,
                                             uds_server)

GRPC = interface.Transport(
    name='grpc', address='the port the server address names',
    listen=grpc_server.listen, dial=grpc_client.dial, choices=('auto', 'tcp', 'grpc'))
UNIX = interface.Transport(
    name='unix', address='a socket file named after a loopback address\'s port (uds.py)',
    listen=uds_server.listen, dial=uds.dial, choices=('auto',), forget=uds.forget)
TCP = interface.Transport(
    name='tcp', address='a port of its own, named by the gRPC Endpoints answer',
    listen=tcp.listen, dial=tcp.dial, choices=('auto', 'tcp'), forget=tcp.forget)

#: The transport whose port the address names: it binds first (the others derive their
#: address from its port), starts last (its Endpoints answer names theirs), and is every
#: client's fallback when no faster path reaches the server.
ADDRESS = GRPC
#: The faster paths, in the order a client prefers them.
PREFERRED = (UNIX, TCP)
#: Every transport, in the order a server binds them.
ALL = (ADDRESS,) + PREFERRED
#: What ``Client(transport=...)`` accepts.
CHOICES = ('auto', 'grpc', 'tcp')


def dial(choice: str, dial: interface.Dial):
    """The channel of the first preferred transport ``choice`` allows that reaches the
    server, or None (then the client calls over ``ADDRESS``)."""
    for transport in PREFERRED:
        if choice in transport.choices:
            channel = transport.dial(dial)
            if channel is not None:
                return channel
    return None


def forget(host: str, port: int) -> None:
    """The server at ``host:port`` stopped: every transport closes its channels to it."""
    for transport in ALL:
        transport.forget(host, port)
