"""The channel caches of the socket transports: a stopped server's channels are closed and
forgotten, found by the server they dial rather than by looking through every channel."""

from __future__ import annotations

from launchpad_py import courier
from launchpad_py.courier.transports import tcp, uds
from launchpad_py.courier.transports.sockets import socket_channel


class Named:
    def name(self):
        return 'served'


def test_a_stop_closes_only_that_servers_channels_and_looks_at_no_other():
    """Of 1,000 cached channels to 500 servers, stopping one closes its two and no other.
    ``server_of`` runs once per channel, when it is made: a stop must not look through the
    others (a process with channels to 2,000 local_mt nodes made 4 million checks over their
    stops, and the launch outlived its grace)."""
    asked = []

    def server_of(key):
        asked.append(key)
        return key[0]

    cache = socket_channel.ChannelCache(server_of=server_of)
    channels = {(server, kind): cache.get((server, kind), f'127.0.0.1:{server}', lambda: None)
                for server in range(500) for kind in ('a', 'b')}
    assert len(asked) == 1000
    cache.close_server(7)
    cache.close_server(7)  # Already closed: nothing to do.
    assert len(asked) == 1000
    for (server, kind), channel in channels.items():
        again = cache.get((server, kind), f'127.0.0.1:{server}', lambda: None)
        assert (again is channel) == (server != 7), (server, kind)


def test_a_stopped_loopback_server_leaves_no_channel_in_either_cache():
    """A real server called over the Unix socket and raw TCP: once it stops, both
    transports' caches hold no channel to it (a new server on its port is dialled afresh)."""
    server = courier.Server(Named()).start()
    port = int(server.address.rpartition(':')[2])
    for transport in ('auto', 'tcp'):
        assert courier.Client(server.address, transport=transport).name() == 'served'
    assert port in uds._channels._keys_of
    assert server.address in tcp._channels._keys_of
    server.stop()
    assert port not in uds._channels._keys_of
    assert server.address not in tcp._channels._keys_of
