"""CacherNode: hits, background refreshes, the staleness bound, errors, concurrent callers."""

from __future__ import annotations

import concurrent.futures
import time

import pytest

import launchpad_py as lp
from nodes_for_node_types import CountingUpstream

MINUTE_MS = 60_000


def _cached_program(refresh_ms, stale_ms, num_caches=1):
    program = lp.Program('cacher')
    upstream = program.add_node(lp.CourierNode(CountingUpstream), label='upstream')
    cached = program.add_node(lp.CacherNode(upstream, refresh_interval_ms=refresh_ms,
                                            stale_after_ms=stale_ms, num_caches=num_caches),
                              label='cache')
    return program, upstream, cached


@pytest.mark.parametrize('launch_type', ['test_mt', 'test_mp'])
def test_concurrent_callers_share_one_upstream_call(launch_type):
    """160 calls from 8 threads within the refresh interval cost the upstream one call."""
    program, upstream, cached = _cached_program(MINUTE_MS, 2 * MINUTE_MS)
    with lp.launch(program, launch_type=launch_type):
        client = cached.dereference()
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda _: client.value('a'), range(160)))
        assert {count for count, _ in answers} == {1}
        assert upstream.dereference().calls('a') == 1


def test_different_arguments_are_cached_apart():
    """Each (method, arguments) has its own entry."""
    program, upstream, cached = _cached_program(MINUTE_MS, 2 * MINUTE_MS)
    with lp.launch(program, launch_type='test_mt'):
        client = cached.dereference()
        assert [client.value(k)[0] for k in ('a', 'b', 'a', 'b')] == [1, 1, 1, 1]
        upstream_client = upstream.dereference()
        assert (upstream_client.calls('a'), upstream_client.calls('b')) == (1, 1)


def test_old_value_is_refreshed_in_the_background():
    """Past the refresh interval callers still get the old value at once while it refreshes."""
    program, upstream, cached = _cached_program(100, MINUTE_MS)
    with lp.launch(program, launch_type='test_mt'):
        client, source = cached.dereference(), upstream.dereference()
        assert client.value('a')[0] == 1
        source.close_gate()
        try:
            # The refresh starts once the value is 100 ms old, and stays blocked at the gate;
            # every answer meanwhile is the cached one, so none of them waited for it.
            deadline = time.monotonic() + 30
            while source.calls('a') < 2 and time.monotonic() < deadline:
                assert client.value('a')[0] == 1
            assert source.calls('a') == 2
            for _ in range(20):  # One refresh in flight, however many callers ask meanwhile.
                assert client.value('a')[0] == 1
            assert source.calls('a') == 2
        finally:
            source.open_gate()
        deadline = time.monotonic() + 30
        answer = 1
        while answer == 1 and time.monotonic() < deadline:
            answer = client.value('a')[0]
        assert answer == 2


def test_stale_value_is_never_returned():
    """Once a value is older than stale_after_ms, callers wait for a fresh one."""
    stale_s = 0.5
    program, upstream, cached = _cached_program(100, stale_s * 1000)
    with lp.launch(program, launch_type='test_mt'):
        client, source = cached.dereference(), upstream.dereference()
        _, first_asked_at = client.value('a')
        source.close_gate()
        try:
            # Answers come from the cache (the refresh is held at the gate) until the
            # value turns stale; the first call after that waits.
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                issued = time.monotonic()
                waiting = client.futures.value('a')
                try:
                    count, asked_upstream_at = waiting.result(timeout=1.0)
                except concurrent.futures.TimeoutError:
                    break
                assert count == 1 and issued - asked_upstream_at < stale_s
            assert not waiting.done()
            assert issued > first_asked_at + stale_s - 0.25
        finally:
            source.open_gate()
        count, asked_upstream_at = waiting.result(timeout=30)
        assert count >= 2 and asked_upstream_at > issued


def test_upstream_error_reaches_caller_and_is_not_cached():
    """The caller sees the upstream's exception; the next call asks the upstream again."""
    program, upstream, cached = _cached_program(MINUTE_MS, 2 * MINUTE_MS)
    with lp.launch(program, launch_type='test_mt'):
        client = cached.dereference()
        with pytest.raises(KeyError, match='first call for k fails'):
            client.fail_first('k')
        assert client.fail_first('k') == 2
        assert client.fail_first('k') == 2  # Now cached.
        assert upstream.dereference().calls('k') == 2


def test_several_caches_each_answer():
    """With num_caches=3 every cache serves, each with its own entries."""
    program, upstream, cached = _cached_program(MINUTE_MS, 2 * MINUTE_MS, num_caches=3)
    with lp.launch(program, launch_type='test_mt'):
        addresses = [a.resolve() for a in cached._addresses]
        answers = [lp.courier.Client(address).value('a')[0] for address in addresses]
        assert answers == [1, 2, 3]
        assert len(set(addresses)) == 3


def test_cacher_options_are_checked():
    """Wrong handles and intervals are refused with the value named."""
    upstream = lp.CourierNode(CountingUpstream).create_handle()
    with pytest.raises(TypeError, match='courier node'):
        lp.CacherNode('not a handle')
    with pytest.raises(ValueError, match='stale_after_ms'):
        lp.CacherNode(upstream, refresh_interval_ms=500, stale_after_ms=100)
    with pytest.raises(ValueError, match="refresh_interval_ms must be a positive number.*-1"):
        lp.CacherNode(upstream, refresh_interval_ms=-1)
    with pytest.raises(ValueError, match='num_caches'):
        lp.CacherNode(upstream, num_caches=0)
