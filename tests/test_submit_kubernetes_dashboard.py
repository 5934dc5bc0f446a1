"""``dashboard ID`` for programs submitted to Kubernetes (issue 27): the fake API server, its
controller pod a local process, and the CLI run as a user runs it, in a process of its own.

The dashboard listens on the pod's loopback; the controller's endpoint relays it
to the local port the CLI opens, reached directly (the pod's IP) or through the
API server's ``pods/portforward``.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import psutil
import pytest

import launchpad_py as lp
from conftest import wait_for
from launchpad_py.submission.platforms import kubernetes
from launchpad_py.submission.submitted import submitted_programs
from test_submit import cli
from test_submit_kubernetes import SCRIPT, cluster, programs_dir, submit, ticks  # noqa: F401

pytest.importorskip('kubernetes', reason="the [kubernetes] extra is not installed "
                                         "(pip install 'launchpad_py[kubernetes]')")


def open_board(program, *args: str) -> tuple[subprocess.Popen, str]:
    """``python -m launchpad_py dashboard ID ARGS`` running, and the URL it printed."""
    board = subprocess.Popen([sys.executable, '-m', 'launchpad_py', 'dashboard', program.id,
                              *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = board.stdout.readline().strip()
    assert url.startswith('http://127.0.0.1:') and '/?token=' in url, board.stderr.read()
    return board, url


def fetch_status(url: str) -> dict:
    return json.loads(urllib.request.urlopen(url.replace('/?', '/api/status?'), timeout=30).read())


def port_of(url: str) -> int:
    return int(url.split(':')[2].split('/')[0])


def assert_closed(port: int) -> None:
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(('127.0.0.1', port), timeout=5).close()


def relayed_connections(port: int) -> list:
    """The connections the controller's endpoint (listening on ``port``) still holds open:
    each relay in the pod is one of them (closed ones linger in TIME_WAIT: the kernel's, held
    by no process). Only their local port is matched: a connection from this machine to port
    ``port`` of some other address (another host's daemon) is not the endpoint's and may
    never end. (Stop 42's CI timed out here once; a stranger on that port, or the fake's
    forward that sent no FIN, ``test_fake_kubelet``, are the two causes found by reading.)"""
    return [c for c in psutil.net_connections('tcp')
            if c.status not in (psutil.CONN_LISTEN, psutil.CONN_TIME_WAIT)
            and c.laddr and c.laddr.port == port]


def test_dashboard_of_a_kubernetes_program_is_forwarded_with_its_token(cluster):
    """By each route (the default, ``--via direct``, ``--via api``) the URL printed serves the
    program's status with the token and refuses without it; Ctrl-C (SIGINT) ends the CLI and
    its local port, and the program runs on. From Python, ``lp.attach(ID).open_dashboard()``
    gives the same relay until closed. `stop` from another process: the program ends, and so
    does a `dashboard` still open, by itself. One program serves every route and the stop:
    none of the routes changes it (each submit costs this file seconds of pod starts)."""
    program = submit(SCRIPT, 'ticker', '60', '--lp_dashboard')
    wait_for(lambda: ticks(program) >= 1, 120, 'the node pod to tick')
    # Looked up once: each lookup asks the API for the pod and its log (2.6 s of this test
    # when asked on every check of the wait below), and the controller stays the same.
    endpoint = kubernetes.controller_pod(program.record)[2]
    for via in (None, 'direct', 'api'):
        forwarded_before = len(cluster.server.forwarded)
        board, url = open_board(program, *(['--via', via] if via else []))
        assert fetch_status(url)['program'] == 'ticker', via
        assert fetch_status(url)['program'] == 'ticker', via  # Each its own relayed connection.
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url.split('?')[0] + 'api/status', timeout=30)
        assert refused.value.code == 403, via
        # Local pods answer directly: the API is spare.
        forwarded = len(cluster.server.forwarded) - forwarded_before
        assert forwarded >= 4 if via == 'api' else forwarded == 0, (via, forwarded)
        board.send_signal(signal.SIGINT)
        assert board.wait(timeout=30) == 130, via
        assert_closed(port_of(url))
        wait_for(lambda: not relayed_connections(endpoint), 30, 'the relays in the pod to end')
        assert program.state() == 'running', via
    tunnel, own_url = lp.attach(program.id).open_dashboard(via='api')
    assert fetch_status(own_url)['program'] == 'ticker'
    tunnel.close()
    assert_closed(port_of(own_url))
    board, url = open_board(program)
    stopped = cli('stop', program.id, '--grace', '5')
    assert stopped.returncode == 0 and stopped.stdout.strip() == f'{program.id}: ended', stopped
    assert board.wait(timeout=60) == 0
    assert_closed(port_of(url))


@pytest.fixture
def unrouted_cluster(tmp_path, monkeypatch):
    """A fake cluster whose pods report a pod IP this machine has no route to.

    The loopback broadcast address fails at once (ENETUNREACH), as a pod network with no
    route does; a black-holed address (TEST-NET-1) takes the same branch of
    ``dashboard_relay.open_for`` but only after its 3 s probe timeout, twice per test."""
    from fake_kube import FakeCluster, FakeNode
    (tmp_path / 'kube').mkdir()
    with FakeCluster(str(tmp_path / 'kube'), [FakeNode('far', pod_ip='127.255.255.255')]) as fake:
        monkeypatch.setenv('KUBECONFIG', fake.kubeconfig)
        yield fake
        for program in submitted_programs():
            if program.state() in ('pending', 'running'):
                program.stop(grace=0, timeout=30)


def test_a_pod_network_out_of_reach_is_crossed_through_the_api(unrouted_cluster):
    """`--via direct` says there is no route; by default the API's port forward is taken."""
    program = submit(SCRIPT, 'ticker', '60', '--lp_dashboard')
    wait_for(lambda: ticks(program) >= 1, 120, 'the node pod to tick')
    done = cli('dashboard', program.id, '--via', 'direct')
    assert done.returncode == 1 and 'no route to pod' in done.stderr, done
    assert '--via' in done.stderr  # It says how to go through the API instead.
    board, url = open_board(program)
    assert fetch_status(url)['program'] == 'ticker'
    assert unrouted_cluster.server.forwarded
    board.send_signal(signal.SIGINT)
    assert board.wait(timeout=30) == 130
    assert_closed(port_of(url))
