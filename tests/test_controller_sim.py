"""The controller driven by 2,000 simulated workers (no processes): what it sends and shows.

The 10,000- and 100,000-worker runs, with their costs, are ``bench/controller_sim.py``.
"""

from __future__ import annotations

import pytest

from bench import sim_workers
from launchpad_py.node_state import NodeState

WORKERS = 2000


@pytest.fixture
def simulated():
    program, references = sim_workers.ring_program(WORKERS)
    controller, workers = sim_workers.launch(program, references)
    try:
        yield controller, workers, references
    finally:
        controller.stop()
        controller.wait(timeout=60)


def test_each_worker_receives_only_the_addresses_its_handles_reference(simulated):
    """Each node gets its learner's and two neighbours' addresses, not the whole table."""
    _, workers, references = simulated
    for worker in workers:
        assert sorted(worker.received) == sorted(references[worker.name]), worker.name
        assert not worker.gone
    # What each got is where its peers said they listen.
    own = {a.key: None for w in workers for a in w._executable.addresses}
    assert len(own) == WORKERS + 1
    bound = {a.key: a.known() for w in workers for a in w._executable.addresses}
    assert all(bound[key] == value for w in workers for key, value in w.received.items())


def test_statuses_are_complete_while_running_and_after_the_stop(simulated):
    """Every node is listed once, running; after the stop every node is listed stopped."""
    controller, _, _ = simulated
    statuses = controller.statuses()
    assert sorted(f'{s.label}/{s.index}' for s in statuses) == sorted(
        ['learner/0'] + [f'worker/{i}' for i in range(WORKERS)])
    assert {s.state for s in statuses} == {NodeState.RUNNING}
    controller.stop()
    controller.wait(timeout=60)
    assert {s.state for s in controller.statuses()} == {NodeState.STOPPED}
