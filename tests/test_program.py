"""The program graph: groups, labels, handles, and node configuration."""

from __future__ import annotations

import pytest

import launchpad_py as lp
from launchpad_py.program import find_handles
from nodes_for_tests import Pinger


def test_groups_collect_nodes_in_order():
    """Nodes added inside a group get its label; re-entering a group accumulates."""
    program = lp.Program('p')
    with program.group('actor'):
        first = lp.CourierNode(Pinger)
        program.add_node(first)
    with program.group('actor'):
        second = lp.CourierNode(Pinger)
        program.add_node(second)
    assert program.groups['actor'] == [first, second]
    assert (first.label, first.index, second.index) == ('actor', 0, 1)


def test_repeated_label_outside_a_group_accumulates():
    """add_node with the same label twice makes a group of two."""
    program = lp.Program('p')
    program.add_node(lp.CourierNode(Pinger), label='server')
    program.add_node(lp.CourierNode(Pinger), label='server')
    assert len(program.groups['server']) == 2
    assert len(program.get_all_nodes()) == 2


def test_a_label_or_group_is_required():
    """Outside a group a label is required (as in the original): a ValueError names the node."""
    program = lp.Program('p')
    with pytest.raises(ValueError, match=r"CourierNode\(Pinger\) added to program 'p' without"):
        program.add_node(lp.CourierNode(Pinger))


@pytest.mark.parametrize('label', ['', None, 3])
def test_empty_or_non_string_group_label_is_an_error(label):
    """A group label must be a non-empty string; the message shows the bad value."""
    program = lp.Program('p')
    with pytest.raises(lp.ProgramError, match='non-empty string') as info:
        with program.group(label):
            pass
    assert repr(label) in str(info.value)


def test_empty_node_label_is_an_error():
    """add_node(label='') names the node in the error."""
    with pytest.raises(lp.ProgramError, match=r"got '' for CourierNode\(Pinger\)"):
        lp.Program('p').add_node(lp.CourierNode(Pinger), label='')


def test_nested_groups_are_an_error():
    """Opening a group inside another names both."""
    program = lp.Program('p')
    with program.group('outer'):
        with pytest.raises(lp.ProgramError, match="'inner' opened inside group 'outer'"):
            with program.group('inner'):
                pass


def test_label_mismatch_inside_a_group_is_an_error():
    """A label that differs from the enclosing group is rejected."""
    program = lp.Program('p')
    with program.group('actor'):
        with pytest.raises(lp.ProgramError, match="label 'learner' .* inside group 'actor'"):
            program.add_node(lp.CourierNode(Pinger), label='learner')


def test_node_cannot_be_added_twice():
    """The same node object belongs to one place in one program."""
    program = lp.Program('p')
    node = lp.CourierNode(Pinger)
    program.add_node(node, label='a')
    with pytest.raises(lp.ProgramError, match='already added'):
        program.add_node(node, label='b')


def test_handles_anywhere_in_arguments_are_edges():
    """Handles nested in lists, tuples and dicts are found as the node's inputs."""
    program = lp.Program('p')
    a = program.add_node(lp.CourierNode(Pinger), label='a')
    b = program.add_node(lp.CourierNode(Pinger), label='b')
    consumer = lp.PyNode(print, [a, (b,)], servers={'main': a})
    assert consumer.input_handles() == [a, b, a]
    assert find_handles({'x': [1, {'y': b}]}) == [b]


def test_create_handle_before_add_node_and_configure_allow_cycles():
    """Two nodes can reference each other via create_handle() and configure()."""
    program = lp.Program('p')
    left, right = lp.CourierNode(Pinger), lp.CourierNode(Pinger)
    left_handle, right_handle = left.create_handle(), right.create_handle()
    left.configure(right_handle)
    right.configure(left_handle)
    program.add_node(left, label='left')
    program.add_node(right, label='right')
    assert left.input_handles() == [right_handle]
    assert right.input_handles() == [left_handle]


def test_handle_dereferenced_outside_a_running_program_is_a_clear_error():
    """Dereferencing before launch says the program is not running and how to fix it."""
    program = lp.Program('p')
    handle = program.add_node(lp.CourierNode(Pinger), label='pinger')
    with pytest.raises(lp.NotRunningError, match="node 'pinger'.*lp.launch"):
        handle.dereference()


def test_get_port_from_address():
    """Ports come out of host:port strings, IPv6 included; junk is refused."""
    assert lp.get_port_from_address('localhost:8080') == 8080
    assert lp.get_port_from_address('[::1]:9') == 9
    with pytest.raises(ValueError, match='host:port'):
        lp.get_port_from_address('nonsense')
