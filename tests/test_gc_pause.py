"""A launch runs no full garbage collection in the launching process (launchers/gc_pause.py)."""

from __future__ import annotations

import gc

import pytest

import launchpad_py as lp
from launchpad_py.launchers import gc_pause


class Hoard:
    """Keeps 60,000 gc-tracked objects, as a hundred nodes' workers and servers would."""

    def __init__(self):
        self.lists = [[] for _ in range(60_000)]

    def size(self) -> int:
        return len(self.lists)


def _program(node_class, nodes: int) -> lp.Program:
    program = lp.Program(f'gc_{node_class.__name__.lower()}')
    with program.group('node'):
        for _ in range(nodes):
            program.add_node(lp.CourierNode(node_class))
    return program


@pytest.fixture
def full_collections():
    """The full collections started while the test runs, counted by a ``gc`` callback."""
    started: list[dict] = []

    def count(phase: str, info: dict) -> None:
        if phase == 'start' and info['generation'] == 2:
            started.append(info)

    gc.callbacks.append(count)
    yield started
    gc.callbacks.remove(count)


def test_a_launch_runs_no_full_collection(full_collections):
    """Ten test_mt nodes make 600,000 tracked objects before the launch returns: none of the
    full collections CPython would start for them (one per quarter of growth) runs then."""
    threshold = gc.get_threshold()
    controller = lp.launch(_program(Hoard, 10), launch_type='test_mt')
    launched = len(full_collections)
    try:
        assert launched == 0
        assert gc.get_threshold() == threshold
    finally:
        controller.stop()
        controller.wait(timeout=60)


def test_the_threshold_comes_back_after_a_launch_that_failed():
    """The launcher refuses the program (test_mp cannot run nodes unserialized): the
    collection threshold the process had before is back."""
    threshold = gc.get_threshold()
    with pytest.raises(lp.ProgramError, match='serialize_py_nodes'):
        lp.launch(_program(Hoard, 1), launch_type='test_mp', serialize_py_nodes=False)
    assert gc.get_threshold() == threshold


def test_overlapping_launches_keep_the_pause_until_the_last_returns():
    """Two launches under way at once: the first to return leaves the pause to the other."""
    threshold = gc.get_threshold()
    first, second = gc_pause.paused(), gc_pause.paused()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert gc.get_threshold()[2] == gc_pause.PAUSED
    second.__exit__(None, None, None)
    assert gc.get_threshold() == threshold


def test_a_threshold_the_program_sets_during_a_launch_stays():
    """The program changes the third threshold while a launch is under way: its value stays."""
    threshold = gc.get_threshold()
    try:
        with gc_pause.paused():
            gc.set_threshold(threshold[0], threshold[1], 25)
        assert gc.get_threshold()[2] == 25
    finally:
        gc.set_threshold(*threshold)
