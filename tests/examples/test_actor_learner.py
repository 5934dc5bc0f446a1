"""The actor-learner example learns CartPole and ends itself."""

from __future__ import annotations

import json
import threading

import pytest

import launchpad_py as lp
from examples.actor_learner.program import Config, cpu_only_resources, make_program
from conftest import wait_for

# A uniformly random policy averages about 22 in CartPole-v1; 150 is far from chance.
TARGET = 150.0


def _run(tmp_path, launch_type: str, config: Config, timeout: float) -> dict:
    path = str(tmp_path / 'result.json')
    resources = cpu_only_resources() if launch_type.endswith('_mp') else None
    controller = lp.launch(make_program(config, result_path=path), launch_type=launch_type,
                           local_resources=resources)
    controller.wait(timeout=timeout)
    with open(path) as f:
        return json.load(f)


@pytest.mark.timeout(180)
def test_learns_cartpole_as_processes(tmp_path):
    """Two actor processes and a JAX learner reach a greedy mean return of 150 (random: ~22)."""
    config = Config(num_actors=2, target_return=TARGET, max_env_steps=400_000, seed=0,
                    eval_interval_s=1.0)
    result = _run(tmp_path, 'test_mp', config, timeout=150)
    assert result['reached_target'], result['history'][-3:]
    assert result['history'][-1]['mean_return'] >= TARGET


@pytest.mark.parametrize('options', [{}, {'unrolls_per_call': 3, 'publish': 'request'}],
                         ids=['defaults', 'three_per_call_published_on_request'])
def test_stops_at_step_budget_as_threads(tmp_path, options):
    """Under test_mt the evaluator ends the program once the env-step budget is used,
    with parameters published either way and unrolls sent one or several per call.

    One batch size (``batch_growth=1``): each size is a JAX compile of seconds before the
    first step, and growth is what test_learns_cartpole_as_processes and
    test_learner_step_compiles_once_per_batch_size cover."""
    config = Config(num_actors=1, batch_size=4, batch_growth=1, target_return=1e9,
                    max_env_steps=1000, eval_interval_s=0.5, eval_episodes=2, **options)
    result = _run(tmp_path, 'test_mt', config, timeout=90)
    assert not result['reached_target']
    assert result['history'][-1]['env_steps'] >= 1000



@pytest.mark.parametrize('unrolls_per_call', [1, 3])
def test_actors_joining_and_leaving_lose_and_double_count_no_unroll(tmp_path, unrolls_per_call):
    """Actors join and leave while the learner trains (test_mp): the added actors' unrolls
    arrive, and from every actor each numbered unroll arrives once, with no gap, also when
    an actor sends several in one call. One batch size: the learner counts unrolls as
    they arrive, and each further size would be a compile of seconds first."""
    config = Config(num_actors=2, batch_size=4, batch_growth=1, target_return=1e9,
                    max_env_steps=10**9, eval_interval_s=60.0, unrolls_per_call=unrolls_per_call)
    program = make_program(config, elastic=True)
    learner = program.groups['learner'][0].create_handle()
    with lp.launch(program, launch_type='test_mp',
                   local_resources=cpu_only_resources()) as controller:
        client = learner.dereference()

        def unrolls_of(actor):
            return client.progress()['unrolls'].get(actor, [0])[0]

        controller.add_nodes('actor', 2)
        wait_for(lambda: min(unrolls_of(2), unrolls_of(3)) >= 3, timeout=60,
                 what='unrolls from the added actors')
        controller.remove_nodes('actor', 3)
        after_removal = unrolls_of(0)
        wait_for(lambda: unrolls_of(0) >= after_removal + 3, timeout=60,
                 what='actor 0 to go on alone')
        unrolls = client.progress()['unrolls']
    assert sorted(unrolls) == [0, 1, 2, 3]
    for actor, (received, distinct, one_past_last) in unrolls.items():
        assert received == distinct == one_past_last, (actor, unrolls)


def test_learner_takes_the_largest_allowed_batch_of_the_unrolls_waiting():
    """The in-memory queue hands out as many of the waiting unrolls as the largest allowed
    batch size holds, oldest first, and leaves the rest for the next update."""
    from examples.actor_learner.replay import InMemoryQueue, batch_sizes
    sizes = batch_sizes(4, 8)
    assert sizes == (4, 8, 16, 32)
    queue = InMemoryQueue(threading.Event(), maxsize=64)
    for number in range(45):
        queue.put({'number': number})
    assert [u['number'] for u in queue.take(sizes)] == list(range(32))
    assert [u['number'] for u in queue.take(sizes)] == list(range(32, 40))
    assert [u['number'] for u in queue.take(sizes)] == list(range(40, 44))


def test_batch_growth_below_one_is_refused_with_the_values():
    """A batch size or growth below 1 is an error naming both values."""
    from examples.actor_learner.replay import batch_sizes
    with pytest.raises(ValueError, match=r'got 16 and 0'):
        batch_sizes(16, 0)


def test_learner_step_compiles_once_per_batch_size():
    """The jitted step compiles once for each batch size the learner takes, up front: not
    again for the first real update, a later one, or after restoring a checkpoint."""
    from examples.actor_learner import learning, network, rollout
    from examples.actor_learner.replay import batch_sizes
    trainer = learning.Trainer(network.init(0, *rollout.env_spec()))
    unroller = rollout.Unroller(seed=1, length=8)
    unrolls = [unroller.unroll(trainer.numpy_params()) for _ in range(8)]
    sizes = batch_sizes(2, 4)
    for size in sizes:
        trainer.compile(learning.stack(unrolls[:2]), size)
    for size in sizes + sizes:
        trainer.update(learning.stack(unrolls[:size]))
    trainer.restore(trainer.state())
    trainer.update(learning.stack(unrolls[:2]))
    assert trainer.compiles == len(sizes)


def test_received_unrolls_count_duplicates_and_gaps():
    """The learner's per-actor count of unroll numbers tells a twice-sent or missing unroll
    from a complete run, keeping only the numbers that arrived early."""
    from examples.actor_learner.learner import ReceivedUnrolls
    received = ReceivedUnrolls()
    for number in (0, 1, 3, 3, 2, 1):
        received.add(number)
    assert received.summary() == [6, 4, 4]  # Received, distinct, one past the highest.
    received.add(6)
    assert received.summary() == [7, 5, 7]  # 4 and 5 missing.


@pytest.mark.parametrize('field, value', [('publish', 'sometimes'), ('unrolls_per_call', 0)])
def test_bad_publish_or_unrolls_per_call_is_refused_with_the_value(field, value):
    with pytest.raises(ValueError, match=f'{field}.*{value!r}' if field == 'publish'
                       else f'{field}.*got {value}'):
        Config(**{field: value})
