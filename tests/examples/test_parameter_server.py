"""The parameter-server example: each topology serves reads, and the benchmark writes its figure."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

import launchpad_py as lp
from conftest import REPO, SSH_HOST_NAMES, host_name, needs_ssh_hosts, ssh_host, wait_for
from examples.parameter_server.program import ParamServer, make_program


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
def test_replicated_servers_across_three_ssh_hosts(tmp_path, monkeypatch):
    """The replicated topology with its groups spread over h1, h2 and h3 under the ssh launcher;
    the meter's result comes back on its output line (no shared path)."""
    # The servers' checkpoints go here, not to ~/.launchpad_py on the hosts, where they stay.
    monkeypatch.setenv('LAUNCHPAD_PY_CHECKPOINT_DIR', str(tmp_path))
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


def _saved(path) -> tuple[int, np.ndarray] | None:
    """(version, params) in a server's checkpoint file, None before its first save."""
    try:
        with np.load(path) as saved:
            return int(saved['version']), saved['params']
    except FileNotFoundError:
        return None


def test_server_restarted_after_sigkill_resumes_its_version_and_params(tmp_path, monkeypatch):
    """The server saves every 5 updates; SIGKILLed under lp.Restart after its save at 20 (and 3
    updates more, lost), the new process starts from the file: version 20, the saved params."""
    monkeypatch.setenv('LAUNCHPAD_PY_CHECKPOINT_DIR', str(tmp_path))
    program = lp.Program('param_server')
    with program.group('server'):
        handle = program.add_node(lp.CourierNode(ParamServer, 100, checkpoint_every=5))
    path = tmp_path / 'param_server' / 'server' / '0' / 'params.npz'
    with lp.launch(program, launch_type='local_mp', failure_policy={
            'server': lp.Restart(max_restarts=1, backoff=(0.05, 0.2))}) as controller:
        server = handle.dereference()  # The test is the writer: it knows every version.
        seen = {}
        for _ in range(23):
            version = server.apply_update(np.full(100, 0.5, np.float32))
            seen[version] = server.get_params()[1]
        saved = wait_for(lambda: _saved(path), what='the server to save a checkpoint')
        assert saved[0] == 20
        np.testing.assert_array_equal(saved[1], seen[20])
        os.kill(controller.statuses()[0].pid, signal.SIGKILL)
        wait_for(lambda: controller.statuses()[0].restarts == 1
                 and controller.statuses()[0].state == lp.NodeState.RUNNING,
                 what='the restart of server/0')
        version, params = server.get_params()
        assert version == saved[0]
        np.testing.assert_array_equal(params, saved[1])
        assert server.apply_update(np.zeros(100, np.float32)) == 21


def test_server_refuses_a_checkpoint_of_another_size(tmp_path, monkeypatch):
    """A save of 5 parameters found by a server of 100 is a clear error, not a silent reshape."""
    monkeypatch.setenv('LAUNCHPAD_PY_CHECKPOINT_DIR', str(tmp_path))
    directory = tmp_path / 'param_server' / 'server' / '0'
    directory.mkdir(parents=True)
    np.savez(directory / 'params.npz', version=np.int64(7), params=np.zeros(5, np.float32))
    program = lp.Program('param_server')
    with program.group('server'):
        program.add_node(lp.CourierNode(ParamServer, 100))
    with pytest.raises(lp.NodeFailedError, match=r'holds 5 parameters but this ParamServer has size 100'):
        lp.launch(program, launch_type='test_mt').wait(timeout=60)
