"""The dashboard's HTTP side: token, JSON, Prometheus text (the browser tests are apart)."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

import pytest

import launchpad_py as lp
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
