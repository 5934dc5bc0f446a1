"""Gaps found by running Acme's distributed agents (docs/migrating.md), reproduced without Acme.

- Colocated actors (``multiprocessing_colocate_actors=True``) failed to start under
  the compatibility runner: their child processes did not alias ``launchpad``.
- When Acme's learner fails to build (a dataset error, a missing package), its
  actors and evaluator fail a moment later, calling a learner that is gone; one
  of those consequences used to reach the controller first and be what
  ``wait()`` raised, while the learner's own error was logged only at DEBUG.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import launchpad_py as lp
from launchpad_py.courier.errors import CourierUnavailableError
from launchpad_py.errors import PeerFailedError
from launchpad_py.node_side import runtime
from launchpad_py.nodes.courier_node import _UnderConstruction
from conftest import REPO

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize('launch_type', ['local_mt', 'local_mp'])
def test_colocated_children_see_the_launchpad_alias(launch_type):
    """Children of a MultiProcessingColocation run `import launchpad` code under the runner."""
    result = subprocess.run(
        [sys.executable, '-m', 'launchpad_py.compat', os.path.join(HERE, 'colocated_actors.py'),
         f'--lp_launch_type={launch_type}'],
        capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "No module named 'launchpad'" not in result.stderr
    for index in (0, 1):
        assert f'actor {index} counted' in result.stdout, result.stdout[-3000:]


@pytest.mark.parametrize('launch_type', ['local_mt', 'local_mp'])
def test_colocated_children_slow_to_stop_do_not_outlast_the_grace_period(launch_type):
    """The colocation kills its children before the grace ends, so its thread ends too."""
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, '-m', 'launchpad_py.compat', os.path.join(HERE, 'colocated_slow_stop.py'),
         f'--lp_launch_type={launch_type}', '--lp_termination_notice_secs=3'],
        capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    assert 'both built; stopping' in result.stdout
    assert 'grace period' not in result.stderr, result.stderr[-3000:]
    assert time.monotonic() - start < 60


def lose_the_learner():
    """What an actor raises when the learner's server went away under its call.

    Its runtime then waits 0.5 s, not STOP_NOTICE_SECONDS (5 s), for a stop that is not
    coming before it reports the failure: set here, in the node's own process (test_mp),
    as the test's monkeypatch does under test_mt (which restores it afterwards)."""
    runtime.STOP_NOTICE_SECONDS = 0.5
    raise CourierUnavailableError("server unavailable calling 'get_variables' on "
                                  "127.0.0.1:1: the peer closed the connection")


def call_a_learner_that_failed_to_build():
    """What an actor raises when its call waited on a learner whose constructor raised."""
    raise PeerFailedError("the object of node 'learner' failed to construct: ValueError")


def fail_once_stopping():
    """A learner whose own error reaches the controller only after the actor's."""
    lp.stop_event().wait(timeout=60)
    raise ValueError('the learner could not build its dataset')


@pytest.mark.parametrize('launch_type, consequence', [
    ('test_mt', lose_the_learner), ('test_mp', lose_the_learner),
    ('test_mp', call_a_learner_that_failed_to_build)])
def test_the_cause_is_reported_not_the_node_that_lost_its_peer(launch_type, consequence,
                                                               monkeypatch):
    """A peer-lost failure that arrives first gives way to the failure that caused it."""
    # The actor need not wait 5 s for a stop that is not coming before it fails; under
    # test_mt it is a thread of this process, which the node function must not change for
    # the tests after this one.
    monkeypatch.setattr(runtime, 'STOP_NOTICE_SECONDS', runtime.STOP_NOTICE_SECONDS)
    program = lp.Program('acme_like')
    program.add_node(lp.PyNode(fail_once_stopping), label='learner')
    program.add_node(lp.PyNode(consequence), label='actor')
    controller = lp.launch(program, launch_type=launch_type)
    with pytest.raises(lp.NodeFailedError, match="node 'learner'.*could not build") as info:
        controller.wait(timeout=60)
    assert isinstance(info.value.__cause__, ValueError)
    states = {s.label: s.state for s in controller.statuses()}
    assert states == {'learner': lp.NodeState.FAILED, 'actor': lp.NodeState.FAILED}


def test_a_later_failure_does_not_replace_a_real_first_one():
    """Only a peer-lost failure gives way; a node's own first error stays the one reported."""
    program = lp.Program('two_errors')
    program.add_node(lp.PyNode(fail_once_stopping), label='learner')
    program.add_node(lp.PyNode(_raise_key_error), label='actor')
    with pytest.raises(lp.NodeFailedError, match="node 'actor'.*KeyError"):
        lp.launch(program, launch_type='test_mp').wait(timeout=60)


def _raise_key_error():
    raise KeyError('actor bug')


def test_calls_waiting_for_a_node_that_failed_to_build_raise_peer_failed():
    """A call waiting on a constructor that raises gets PeerFailedError, still a RuntimeError."""
    under_construction = _UnderConstruction('learner')
    under_construction.finish(error=ValueError('the learner could not build its dataset'))
    with pytest.raises(PeerFailedError, match="node 'learner' failed to construct: ValueError"):
        under_construction.get_variables()
    assert issubclass(PeerFailedError, RuntimeError)
