"""The dashboard's HTTP side: token, JSON, Prometheus text (the browser tests are apart)."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

import launchpad_py as lp
from launchpad_py.observability import dashboard, group_summary, prometheus
from tests.observe_nodes import Counted


def _get(url, headers=None):
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=30) as reply:
        return reply.status, reply.read().decode()


@pytest.fixture
def watched(capsys):
    program = lp.Program('boarded')
    handle = program.add_node(lp.CourierNode(Counted), label='server')
    with lp.launch(program, launch_type='local_mp', dashboard=True) as controller:
        yield controller, handle


def test_dashboard_is_off_by_default():
    """Without dashboard=True (or --lp_dashboard) nothing listens."""
    program = lp.Program('quiet')
    program.add_node(lp.CourierNode(Counted), label='server')
    with lp.launch(program, launch_type='local_mt') as controller:
        assert controller.dashboard is None


def test_address_and_token_are_printed(watched, capsys):
    """The launcher prints the loopback address with the token."""
    controller, _ = watched
    out = capsys.readouterr().out
    assert f'http://127.0.0.1:{controller.dashboard.port}/?token={controller.dashboard.token}' in out


@pytest.mark.parametrize('path', ['/', '/api/status', '/metrics'])
def test_every_page_needs_the_token(watched, path):
    """Without the token, or with a wrong one, every route answers 403."""
    controller, _ = watched
    base = f'http://127.0.0.1:{controller.dashboard.port}{path}'
    for url in (base, base + '?token=wrong'):
        with pytest.raises(urllib.error.HTTPError) as refused:
            _get(url)
        assert refused.value.code == 403


def test_bearer_header_is_accepted(watched):
    """Scrapers may send the token as a bearer header instead."""
    controller, _ = watched
    status, _ = _get(f'http://127.0.0.1:{controller.dashboard.port}/metrics',
                     {'Authorization': f'Bearer {controller.dashboard.token}'})
    assert status == 200


def test_prometheus_counts_known_traffic(watched):
    """After 31 calls, /metrics says 31 for that node and method, in valid exposition lines."""
    controller, handle = watched
    client = handle.dereference()
    for i in range(31):
        client.echo(i)
    controller.dashboard.refresh()  # The next scrape sees the calls without waiting a tick.
    _, text = _get(controller.dashboard.url.replace('/?', '/metrics?'))
    assert 'lp_node_calls_total{program="boarded",node="server/0",method="echo"} 31' in text
    assert 'lp_node_state{program="boarded",node="server/0",state="running"} 1' in text
    sample = re.compile(r'^[a-z_]+(\{[^}]*\})? [-+0-9.e]+$')
    for line in text.splitlines():
        assert line.startswith('# ') or sample.match(line), line


def test_api_status_lists_every_node(watched):
    """/api/status is the statistics as JSON, with history and output per node."""
    controller, _ = watched
    _, text = _get(controller.dashboard.url.replace('/?', '/api/status?'))
    report = json.loads(text)
    assert [n['name'] for n in report['nodes']] == ['server/0']
    assert {'history', 'output', 'traceback', 'methods'} <= set(report['nodes'][0])


def test_half_open_requests_cost_bounded_threads_and_time(watched, capsys, monkeypatch):
    """150 requests that never finish add at most MAX_CONNECTIONS threads, are closed within
    CONNECTION_SECONDS, leave no traceback behind, and the page is served afterwards."""
    # The same bound, reached sooner: 1 s per request instead of the dashboard's 5.
    monkeypatch.setattr(dashboard._Handler, 'timeout', 1.0)
    controller, _ = watched
    port = controller.dashboard.port
    threads_before = threading.active_count()
    strangers = [socket.create_connection(('127.0.0.1', port), timeout=30) for _ in range(150)]
    try:
        for sock in strangers:
            sock.sendall(b'GET /api/status HTTP/1.1\r\nHost: x\r\n')  # Headers never end.
        started = time.monotonic()
        for sock in strangers:
            while sock.recv(65536):  # Closed by the server (or refused at once when busy).
                pass
        waited = time.monotonic() - started
        assert threading.active_count() - threads_before <= dashboard.MAX_CONNECTIONS
    finally:
        for sock in strangers:
            sock.close()
    assert waited < dashboard._Handler.timeout + 10
    status, _ = _get(controller.dashboard.url)
    assert status == 200
    assert "Traceback" not in capsys.readouterr().err


@pytest.fixture
def crowd(capsys):
    """A program whose 'worker' group is too big for one card per node."""
    program = lp.Program('crowded')
    program.add_node(lp.CourierNode(Counted), label='server')
    with program.group('worker'):
        for _ in range(group_summary.COLLAPSE_OVER + 10):
            program.add_node(lp.CourierNode(Counted))
    with lp.launch(program, launch_type='local_mt', dashboard=True) as controller:
        controller.dashboard.refresh()
        yield controller


def test_big_group_shows_as_counts_with_its_members_on_demand(crowd):
    """A group over COLLAPSE_OVER nodes is one card with counts by state; the page has no
    card per member, and /api/group serves its members a page at a time, in index order."""
    board = crowd.dashboard
    size = group_summary.COLLAPSE_OVER + 10
    _, page = _get(board.url)
    assert page.count('data-group="worker"') == 2  # Its box in the graph, and its card.
    assert 'data-node="worker/0"' not in page and 'data-node="server/0"' in page
    report = json.loads(_get(board.url.replace('/?', '/api/status?'))[1])
    assert [n['name'] for n in report['nodes']] == ['server/0']
    assert report['groups']['worker'] == {'size': size, 'states': {'running': size}, 'failed': []}
    first = json.loads(_get(board.url.replace('/?', '/api/group?') + '&label=worker&limit=25')[1])
    rest = json.loads(_get(board.url.replace('/?', '/api/group?')
                           + '&label=worker&offset=25&limit=25')[1])
    assert first['size'] == rest['size'] == size
    assert [m['name'] for m in first['members'] + rest['members']] == [
        f'worker/{i}' for i in range(size)]
    assert {'history', 'output', 'state'} <= set(first['members'][0])


def test_group_page_rejects_offsets_that_are_not_numbers(crowd):
    """A bad offset is a 400 saying what is wrong, not a traceback."""
    with pytest.raises(urllib.error.HTTPError) as refused:
        _get(crowd.dashboard.url.replace('/?', '/api/group?') + '&label=worker&offset=x')
    assert refused.value.code == 400


def test_prometheus_has_group_series_for_groups_too_big_for_per_node_series():
    """Past SERIES_PER_NODE_MAX nodes a group's series are per group (counts by state, summed
    calls), so a scrape of 100,000 workers stays small; small groups keep per-node series."""
    from launchpad_py.observability.statistics import MethodStatistics, NodeStatistics
    size = group_summary.SERIES_PER_NODE_MAX + 1

    def node(label, index, state, calls):
        return NodeStatistics(label, index, state, 'localhost', None, 1.0, 0, None, None, None,
                              calls=calls, methods=[MethodStatistics('step', calls, 0, 0.001, 0.002,
                                                                     0, calls, 0.1)])
    nodes = [node('actor', i, lp.NodeState.FAILED if i < 3 else lp.NodeState.RUNNING, 2)
             for i in range(size)] + [node('learner', 0, lp.NodeState.RUNNING, 5)]
    text = prometheus.exposition('big', nodes)
    assert 'lp_group_nodes{program="big",group="actor",state="failed"} 3' in text
    assert f'lp_group_nodes{{program="big",group="actor",state="running"}} {size - 3}' in text
    assert f'lp_group_calls_total{{program="big",group="actor",method="step"}} {2 * size}' in text
    assert 'node="actor/' not in text
    assert 'lp_node_calls_total{program="big",node="learner/0",method="step"} 5' in text
    nodes[0].restart_reasons = {'evicted': 2}  # Pods the cluster evicted, started again.
    nodes[1].restart_reasons = {'evicted': 1, 'failed': 1}
    text = prometheus.exposition('big', nodes)
    assert 'lp_group_restarts_by_reason_total{program="big",group="actor",reason="evicted"} 3' in text
    assert 'lp_group_restarts_by_reason_total{program="big",group="actor",reason="failed"} 1' in text
