"""Late binding on the local launchers: nodes bind port 0 (or the port fixed for them),
report it, and learn only the addresses their handles reference."""

from __future__ import annotations

import socket

import pytest

import launchpad_py as lp
from scale_nodes import Counter, count_known_addresses

LOCAL = ['local_mt', 'local_mp']


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize('launch_type', LOCAL)
def test_a_port_fixed_by_the_program_is_kept(launch_type):
    """A node whose address the program fixed serves there; the others get ports of their own."""
    program = lp.Program('fixed')
    fixed_node, free_node = lp.CourierNode(Counter), lp.CourierNode(Counter)
    port = _free_port()
    fixed_node.courier_address.assign(f'127.0.0.1:{port}')
    fixed, free = program.add_node(fixed_node, label='fixed'), program.add_node(free_node,
                                                                                label='free')
    with lp.launch(program, launch_type=launch_type):
        assert fixed.dereference().add(1) == 1
        assert fixed_node.courier_address.resolve() == f'127.0.0.1:{port}'
        assert free.dereference().add(2) == 2
        assert free_node.courier_address.resolve() != f'127.0.0.1:{port}'
    assert not free_node.courier_address.is_assigned  # The next launch binds afresh.


def test_a_node_learns_only_the_addresses_its_handles_reference(tmp_path):
    """Of 30 servers, a node that holds handles to 2 knows those 2 addresses and no others."""
    program = lp.Program('edges')
    with program.group('counter'):
        counters = [program.add_node(lp.CourierNode(Counter)) for _ in range(30)]
    known = tmp_path / 'known'
    program.add_node(lp.PyNode(count_known_addresses, counters[3:5], str(known)), label='two')
    lp.launch(program, launch_type='test_mp').wait(timeout=120)
    assert known.read_text() == '2'


def test_addresses_are_unknown_again_after_the_program():
    """Once a program ended, its handles no longer resolve in the launching process."""
    program = lp.Program('over')
    handle = program.add_node(lp.CourierNode(Counter), label='counter')
    with lp.launch(program, launch_type='test_mt'):
        assert handle.dereference().add(1) == 1
    with pytest.raises(lp.NotRunningError, match="node 'counter'"):
        handle.dereference()


@pytest.mark.parametrize('launch_type', ['test_mt', 'test_mp'])
def test_launching_program_after_program_keeps_no_addresses(launch_type):
    """A process that launches one program after another keeps no key of the ended ones in
    its address directory (it kept every unpickled address's key: 20 more a launch here).

    Judged by each ended program's own keys, and by the directory not growing: its size
    alone also counted what earlier tests in the process had left, which a later launch
    could take away (a node binding a port that an old entry names), and failed then."""
    from launchpad_py.program import address

    def launch_one() -> set[str]:
        program = lp.Program('again')
        handles = [program.add_node(lp.CourierNode(Counter), label='counter') for _ in range(20)]
        with lp.launch(program, launch_type=launch_type):
            assert handles[0].dereference().add(1) == 1
        return {handle.address.key for handle in handles}

    assert not address.directory.keys() & launch_one()
    kept = address.directory.size()
    for _ in range(3):
        assert not address.directory.keys() & launch_one()
    assert address.directory.size() <= kept
