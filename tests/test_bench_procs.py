"""bench.procs: a peer's server process is placed as a launched node is."""

import os

import pytest

from bench import procs
from bench.peers_floor import FloorPeer


@pytest.fixture
def floor():
    peer = FloorPeer("unix")
    peer.start()
    yield peer
    peer.stop()


def test_a_peer_server_runs_in_a_session_of_its_own_as_a_launched_node_does(floor):
    """The floor's server leads its own session (so its own scheduler autogroup),
    like a node local_mp starts with start_new_session, not the benchmark's."""
    pid = floor.server_pid()
    assert os.getsid(pid) == pid
    assert os.getsid(pid) != os.getsid(0)
    assert floor.call("echo", b"x") == b"x"  # Still served from there.


def test_a_peer_server_in_its_own_session_ends_when_stopped(floor):
    """Its own session does not keep it alive: stop() (stdin EOF) ends it."""
    proc = floor.server.proc
    floor.stop()
    assert proc.wait(timeout=10) is not None
