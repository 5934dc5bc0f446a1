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
from launchpad_py.observability import dashboard
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


def test_half_open_requests_cost_bounded_threads_and_time(watched, capsys):
    """150 requests that never finish add at most MAX_CONNECTIONS threads, are closed within
    CONNECTION_SECONDS, leave no traceback behind, and the page is served afterwards."""
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
    assert waited < dashboard.CONNECTION_SECONDS + 10
    status, _ = _get(controller.dashboard.url)
    assert status == 200
    assert "Traceback" not in capsys.readouterr().err
