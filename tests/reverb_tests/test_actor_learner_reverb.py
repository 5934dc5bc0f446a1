"""The actor-learner example with a Reverb queue between actors and learner.

Runs in the ``[reverb]`` environment; elsewhere it is skipped with the reason.
"""

from __future__ import annotations

import json

import pytest

import launchpad_py as lp
from examples.actor_learner.program import Config, cpu_only_resources, make_program
from examples.actor_learner.replay import reverb_missing_reason

_MISSING = reverb_missing_reason()
pytestmark = [pytest.mark.reverb,
              pytest.mark.skipif(_MISSING is not None, reason=_MISSING or '')]

TARGET = 150.0  # A uniformly random policy averages about 22.


@pytest.mark.timeout(180)
def test_learns_cartpole_through_reverb(tmp_path):
    """Actors insert unrolls into a ReverbNode queue; the learner samples them and learns."""
    path = str(tmp_path / 'result.json')
    config = Config(num_actors=2, target_return=TARGET, max_env_steps=400_000,
                    eval_interval_s=1.0)
    program = make_program(config, replay='reverb', result_path=path)
    lp.launch(program, launch_type='test_mp',
              local_resources=cpu_only_resources()).wait(timeout=150)
    with open(path) as f:
        result = json.load(f)
    assert result['reached_target'], result['history'][-3:]


def test_an_actor_waiting_on_a_full_queue_heeds_the_stop():
    """A put into a full Reverb queue returns once the program stops. Reverb's own insert
    waits for room with no deadline, stop or not: the actor stuck there was killed at the
    end of the stop's grace period (10 s in the reverb test above)."""
    import threading

    import numpy as np
    import reverb

    from examples.actor_learner.replay import FIELDS, ReverbQueue, reverb_tables
    server = reverb.Server(tables=reverb_tables(max_size=1))
    try:
        stop = threading.Event()
        queue = ReverbQueue(reverb.Client(f'localhost:{server.port}'), stop)
        unroll = {name: np.zeros(2, np.float32) for name in FIELDS}
        queue.put(unroll)  # The table is now full.
        second = threading.Thread(target=queue.put, args=(unroll,), daemon=True)
        second.start()
        second.join(0.5)
        assert second.is_alive(), 'a put into a full queue returned without room or stop'
        stop.set()
        second.join(10)
        assert not second.is_alive(), 'the put into a full queue ignored the stop'
    finally:
        server.stop()


def test_a_learner_waiting_in_reverbs_sampler_heeds_the_stop():
    """A take whose sample waits inside Reverb returns None once the program stops. Reverb's
    sampler waits with no deadline, also for a server that has gone: the Reverb node stops
    with the program, and a learner whose sample was under way then was killed at the end of
    the stop's grace period (the reverb test above, 1 run in 3). Here a rate limiter holds
    the sample back, the same wait inside the same sampler call."""
    import threading

    import numpy as np
    import reverb

    from examples.actor_learner.replay import FIELDS, TABLE, ReverbQueue
    # Sampling waits for 3 items; the table holds 2, enough for the take's batch of 1.
    table = reverb.Table(TABLE, sampler=reverb.selectors.Fifo(), remover=reverb.selectors.Fifo(),
                         max_size=10, rate_limiter=reverb.rate_limiters.MinSize(3))
    server = reverb.Server(tables=[table])
    try:
        stop = threading.Event()
        queue = ReverbQueue(reverb.Client(f'localhost:{server.port}'), stop)
        unroll = {name: np.zeros(2, np.float32) for name in FIELDS}
        queue.put(unroll)
        queue.put(unroll)
        taken = []
        taker = threading.Thread(target=lambda: taken.append(queue.take((1,))), daemon=True)
        taker.start()
        taker.join(0.5)
        assert taker.is_alive(), f'a take returned while Reverb held its sample back: {taken}'
        stop.set()
        taker.join(10)
        assert not taker.is_alive(), "the take waiting in Reverb's sampler ignored the stop"
        assert taken == [None]
    finally:
        # A third item lets the sample left behind finish before the server goes.
        reverb.Client(f'localhost:{server.port}').insert(
            [np.zeros(2, np.float32)] * len(FIELDS), priorities={TABLE: 1.0})
        server.stop()
