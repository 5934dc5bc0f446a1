"""The transports, in one place: the server listens on each that applies, the client
picks the first that reaches its server.

To add a transport, write its ``listen`` and ``dial`` (see ``interface.py``) and
add its ``Transport`` here; ``courier.Server`` and ``courier.Client`` name none.

gRPC's modules (and gRPC, 12 MiB) load on a process's first gRPC listen or dial, not
with ``courier``: every ``launchpad_py`` import loads this module, and a node that never
serves nor calls (a ``PyNode`` in a pod of its own, a thousand of them on one machine:
issue 25) should not pay for it.
"""

from __future__ import annotations

import importlib

from launchpad_py.courier.transports import interface, tcp, uds, uds_server


def _on_first_use(module: str, function: str):
    """``module.function``, with ``module`` imported at the first call."""
    def call(*args):
        return getattr(importlib.import_module(module), function)(*args)
    return call


GRPC = interface.Transport(
    name='grpc', address='the port the server address names',
    listen=_on_first_use('launchpad_py.courier.transports.grpc_server', 'listen'),
    dial=_on_first_use('launchpad_py.courier.transports.grpc_client', 'dial'),
    choices=('auto', 'tcp', 'grpc'))
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
