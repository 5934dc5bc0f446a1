"""Servers and clients take their transports from one place: courier/transports/registry.py."""

from __future__ import annotations

from launchpad_py import courier
from launchpad_py.courier.transports import interface, registry


class Echo:
    def echo(self, value):
        return value


def _counting(transport: interface.Transport, listened: list, dialed: list):
    """``transport`` under its own name, noting every listen and dial that goes through it."""
    def listen(serving: interface.Serving):
        listened.append(serving.label)
        return transport.listen(serving)

    def dial(dial: interface.Dial):
        dialed.append(dial.address)
        return transport.dial(dial)

    return interface.Transport(transport.name, transport.address, listen, dial, transport.choices)


def test_a_transport_in_the_registry_is_listened_on_and_dialed(monkeypatch):
    """A transport swapped into the registry is what every server listens on and what a
    client dials first; a client told to use gRPC dials it not at all."""
    listened, dialed = [], []
    unix = _counting(registry.UNIX, listened, dialed)
    monkeypatch.setattr(registry, 'PREFERRED', (unix, registry.TCP))
    monkeypatch.setattr(registry, 'ALL', (registry.ADDRESS, unix, registry.TCP))
    with courier.Server(Echo(), label='echo') as server:
        assert listened == ['echo'] and server.local_path is not None
        assert courier.Client(server.address, timeout=10).echo(1) == 1
        assert dialed == [server.address]
        assert courier.Client(server.address, transport='grpc', timeout=10).echo(2) == 2
        assert dialed == [server.address]


def test_a_transport_that_does_not_apply_has_no_listener(monkeypatch):
    """With the Unix socket turned off, a loopback server has no such listener but still the
    next transport's (raw TCP), which a client told to use TCP dials through the registry."""
    listened, dialed = [], []
    tcp = _counting(registry.TCP, listened, dialed)
    monkeypatch.setattr(registry, 'PREFERRED', (registry.UNIX, tcp))
    monkeypatch.setattr(registry, 'ALL', (registry.ADDRESS, registry.UNIX, tcp))
    with courier.Server(Echo(), label='echo', local_transport=False) as server:
        assert server.local_path is None and server.tcp_port is not None
        client = courier.Client(server.address, transport='tcp', timeout=10)
        assert client.echo(3) == 3
        assert dialed == [server.address] and listened == ['echo']
