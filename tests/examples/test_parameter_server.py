"""The parameter-server example: each topology serves reads, and the benchmark writes its figure."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys


import launchpad_py as lp
from conftest import REPO, SSH_HOST_NAMES, host_name, needs_ssh_hosts, ssh_host
from examples.parameter_server.program import make_program


def _run(tmp_path, launch_type: str, topology: str, num_requesters: int) -> dict:
    path = str(tmp_path / 'result.json')
    program = make_program(topology, num_requesters, num_servers=2, param_size=1000,
                           duration_s=1.0, result_path=path)
    lp.launch(program, launch_type=launch_type).wait(timeout=60)
    with open(path) as f:
        return json.load(f)


def _assert_served(result: dict, num_requesters: int) -> None:
    assert result['num_requesters'] == num_requesters
    assert result['queries'] >= num_requesters  # Every requester got at least one answer.
    assert result['qps'] > 0
    assert result['newest_version'] >= 1, 'the writer never updated the parameters'


def test_single_server_as_threads(tmp_path):
    """One server, three requesters under test_mt: reads succeed and see the writer's updates."""
    _assert_served(_run(tmp_path, 'test_mt', 'single', 3), 3)


def test_replicated_servers_as_processes(tmp_path):
    """Two replicas, four requesters spread over them under test_mp."""
    _assert_served(_run(tmp_path, 'test_mp', 'replicated', 4), 4)


def test_cached_server_as_processes(tmp_path):
    """One server behind an lp.CacherNode; requesters read through the cache under test_mp."""
    _assert_served(_run(tmp_path, 'test_mp', 'cached', 4), 4)


def test_benchmark_writes_csv_and_plot(tmp_path):
    """A two-point sweep of the single topology writes a normalized CSV and a PNG."""
    command = [sys.executable, '-m', 'examples.parameter_server.benchmark',
               f'--output_dir={tmp_path}', '--requesters=1,2', '--topologies=single',
               '--duration_s=0.3', '--param_size=100', '--repeats=1']
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(tmp_path / 'param_server_scaling.csv') as f:
        rows = list(csv.DictReader(f))
    assert [(r['topology'], r['num_requesters']) for r in rows] == [('single', '1'), ('single', '2')]
    assert float(rows[0]['normalized_qps']) == 1.0
    assert all(float(r['qps']) > 0 for r in rows)
    with open(tmp_path / 'param_server_scaling.png', 'rb') as f:
        assert f.read(8) == b'\x89PNG\r\n\x1a\n'


@needs_ssh_hosts
def test_replicated_servers_across_three_ssh_hosts():
    """The replicated topology with its groups spread over h1, h2 and h3 under the ssh launcher;
    the meter's result comes back on its output line (no shared path)."""
    program = make_program('replicated', 3, num_servers=2, param_size=1000, duration_s=1.0)
    hosts = [ssh_host(name) for name in SSH_HOST_NAMES]
    resources = {'server': hosts[1:], 'writer': hosts[0], 'requester': hosts, 'meter': hosts[2]}
    controller = lp.launch(program, launch_type='ssh', resources=resources)
    controller.wait(timeout=120)
    assert {s.host for s in controller.statuses()} == {host_name(h) for h in SSH_HOST_NAMES}
    line = re.search(r'meter: (\d+) requesters, (\d+) queries, (\d+) queries/s in total; '
                     r'parameters at version (\d+)', controller.output_tail('meter/0'))
    assert line, controller.output_tail('meter/0')
    requesters, queries, qps, version = map(int, line.groups())
    _assert_served({'num_requesters': requesters, 'queries': queries, 'qps': qps,
                    'newest_version': version}, 3)
