"""ReverbNode with a real dm-reverb server, always called across a process boundary.

These tests run in their own environment (.venv-reverb, made by scripts/test.sh
from the [reverb] extra), since dm-reverb pins TensorFlow and numpy<2.
"""

from __future__ import annotations

import os
import time

import pytest

import launchpad_py as lp
from reverb_nodes_for_tests import TABLE, InsertAndSample, checkpointer, insert_then_stop, make_tables

_ENDED_WELL = {lp.NodeState.FINISHED, lp.NodeState.STOPPED}


def test_node_in_another_process_inserts_and_samples():
    """A courier node in its own process writes to and samples from the reverb node."""
    program = lp.Program('replay')
    replay = program.add_node(lp.ReverbNode(make_tables), label='replay')
    user = program.add_node(lp.CourierNode(InsertAndSample, replay), label='user')
    with lp.launch(program, launch_type='test_mp') as controller:
        values, user_pid = user.dereference().round_trip([1.0, 2.0, 3.0])
        pids = {s.label: s.pid for s in controller.statuses()}
    assert values == [1.0, 2.0, 3.0]
    assert user_pid == pids['user'] != pids['replay']


def test_items_survive_a_program_restart_through_the_final_checkpoint(tmp_path):
    """lp.stop() checkpoints the tables; the next program with that path starts with the items."""
    make_checkpointer = checkpointer(str(tmp_path))
    first = lp.Program('before')
    replay = first.add_node(lp.ReverbNode(make_tables, checkpoint_ctor=make_checkpointer),
                            label='replay')
    first.add_node(lp.PyNode(insert_then_stop, replay, 5), label='writer')
    controller = lp.launch(first, launch_type='test_mp')
    controller.wait(timeout=120)
    assert {s.state for s in controller.statuses()} <= _ENDED_WELL

    second = lp.Program('after')
    replay = second.add_node(lp.ReverbNode(make_tables, checkpoint_ctor=make_checkpointer),
                             label='replay')
    with lp.launch(second, launch_type='test_mp'):
        assert replay.dereference().server_info()[TABLE].current_size == 5


def test_checkpoints_are_written_periodically(tmp_path):
    """With checkpoint_time_delta_minutes, checkpoints appear while the program runs."""
    program = lp.Program('periodic')
    replay = program.add_node(lp.ReverbNode(make_tables, checkpoint_ctor=checkpointer(str(tmp_path)),
                                            checkpoint_time_delta_minutes=0.005), label='replay')
    with lp.launch(program, launch_type='test_mp'):
        replay.dereference().insert([1.0], priorities={TABLE: 1.0})
        deadline = time.monotonic() + 60
        while not os.listdir(tmp_path) and time.monotonic() < deadline:
            lp.wait_for_stop(timeout=0.1)  # The launcher's stop event: a bounded pause.
        assert os.listdir(tmp_path)


def test_reverb_node_colocated_with_a_courier_node():
    """A reverb server and a courier node that uses it share one process as threads."""
    replay_node = lp.ReverbNode(make_tables)
    user_node = lp.CourierNode(InsertAndSample, replay_node.create_handle())
    program = lp.Program('colocated-replay')
    program.add_node(lp.MultiThreadingColocation([replay_node, user_node]), label='learner')
    with lp.launch(program, launch_type='test_mp'):
        values, _ = user_node.create_handle().dereference().round_trip([4.0, 5.0])
    assert values == [4.0, 5.0]


def test_reverb_node_options_are_checked():
    """A periodic checkpoint without a checkpointer, or a bad interval, is refused."""
    with pytest.raises(ValueError, match='needs a checkpoint_ctor'):
        lp.ReverbNode(make_tables, checkpoint_time_delta_minutes=1)
    with pytest.raises(ValueError, match='positive number'):
        lp.ReverbNode(make_tables, checkpoint_ctor=checkpointer('/tmp'),
                      checkpoint_time_delta_minutes=0)
    with pytest.raises(TypeError, match='priority_tables_fn'):
        lp.ReverbNode('tables')
