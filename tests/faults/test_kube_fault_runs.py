"""Fault injection under Kubernetes: the fault program's pods, each launch hit once at random.

Opt-in: ``LP_K8S_FAULT_RUNS=100 .venv/bin/python -m pytest tests/faults/test_kube_fault_runs.py -s``
runs on the fake API server with pods as local processes; ``LP_K8S_FAULT_PODMAN=5`` runs
pods under podman (root, the lp-base image; see test_kubernetes_podman.py). With
``LP_FAULT_REPORT=DIR`` both write their runs and totals into ``DIR/faults_kubernetes.json``,
each under its own key (the podman set's: ``LP_FAULT_KEY``, else ``podman_YYYYMMDD``). The faults (``kube_faults``): a SIGKILL or a pause of a pod's
process, its pod deleted through the API, or evicted. The counts are those of
test_fault_runs.py, plus API objects and containers left after the run, and under podman
pods left after the fake cluster's close; all must be 0.
Two fixed runs (a deleted params pod, an evicted coordinator) are in the default suite.
"""

from __future__ import annotations

import collections
import json
import os
import random
import subprocess
import time

import pytest

from conftest import needs_kubernetes_client, needs_ssh_hosts
from kube_faults import PODMAN_PATH, SharedTmpPodman, kube_run
from test_fault_runs import _line, _problems, _summary

RUNS = int(os.environ.get('LP_K8S_FAULT_RUNS', '0'))
PODMAN_RUNS = int(os.environ.get('LP_K8S_FAULT_PODMAN', '0'))
#: The podman set's key in the report: ``LP_FAULT_KEY``, or one per day (earlier sets kept).
PODMAN_KEY = os.environ.get('LP_FAULT_KEY') or time.strftime('podman_%Y%m%d', time.gmtime())
pytestmark = [needs_kubernetes_client, needs_ssh_hosts]


def _kube_problems(run: dict) -> dict[str, int]:
    return {**_problems(run), 'objects_left': run['objects_left'],
            'containers_left': run['containers_left'],
            'podman_left': run.get('podman_left', 0)}


def _runs(key: str, count: int, tmp_path, **cluster) -> dict:
    """``count`` random runs; prints each and records the runs so far under ``key`` after each
    (a run cut short still leaves its count), and returns the summary and the runs."""
    seed = int(os.environ.get('LP_FAULT_SEED', '14'))
    rng = random.Random(seed)
    runs = []
    commit = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True,
                            text=True, cwd=os.path.dirname(__file__)).stdout.strip()
    started = {'seed': seed, 'commit': commit,
               'load_at_start': [round(x, 2) for x in os.getloadavg()],
               'started_at': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}
    for index in range(count):
        runs.append(kube_run(rng, str(tmp_path / f'run{index}'), **cluster))
        print(_line(index, runs[-1]), flush=True)
        result = {'summary': {**started, **_kube_summary(runs, count)}, 'runs': runs}
        _record(key, result)
    print(json.dumps(result['summary'], indent=1))
    return result


def _kube_summary(runs: list[dict], planned: int) -> dict:
    totals = collections.Counter()
    for run in runs:
        totals.update(_kube_problems(run))
    return {**_summary(runs), 'planned_runs': planned, 'objects_left': totals['objects_left'],
            'containers_left': totals['containers_left'], 'podman_left': totals['podman_left'],
            'podman_swept': sum(run.get('podman_swept', 0) for run in runs),
            'rescheduled': sum(run.get('rescheduled', 0) for run in runs),
            'load_after': [round(x, 2) for x in os.getloadavg()],
            'ended_at': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}


def _record(key: str, result: dict) -> None:
    """Adds ``result`` under ``key`` to the report's faults_kubernetes.json (others kept)."""
    if not os.environ.get('LP_FAULT_REPORT'):
        return
    path = os.path.join(os.environ['LP_FAULT_REPORT'], 'faults_kubernetes.json')
    report = {}
    if os.path.exists(path):
        with open(path) as f:
            report = json.load(f)
    report[key] = result
    with open(path, 'w') as f:
        json.dump(report, f, indent=1)


def _assert_clean(result: dict) -> None:
    summary = result['summary']
    assert all(summary[k] == 0 for k in _kube_problems(result['runs'][0])), summary


@pytest.mark.skipif(RUNS <= 0, reason='fault run; set LP_K8S_FAULT_RUNS=100 to run it')
@pytest.mark.timeout(200 * max(RUNS, 1))
def test_random_pod_faults_end_as_the_policy_says(tmp_path):
    """RUNS launches on the fake API (pods as processes), one random pod fault each:
    every count is 0."""
    result = _runs('fake_api_process_pods', RUNS, tmp_path)
    _assert_clean(result)


@pytest.mark.skipif(PODMAN_RUNS <= 0, reason='podman fault run; set LP_K8S_FAULT_PODMAN=5')
@pytest.mark.timeout(400 * max(PODMAN_RUNS, 1))
def test_random_pod_faults_under_podman_end_as_the_policy_says(tmp_path, monkeypatch):
    """PODMAN_RUNS launches with real pods under podman on the namespace hosts, one random
    pod fault each: every count is 0."""
    from fake_kube.runtimes import podman
    from test_kubernetes_podman import _build_image
    conf = tmp_path / 'containers.conf'
    conf.write_text('[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]\n'
                    '[engine]\nruntime = "runc"\n')  # As test_kubernetes_podman's fixture.
    monkeypatch.setenv('CONTAINERS_CONF', str(conf))
    context = tmp_path / 'context'
    context.mkdir()
    built = _build_image(str(context))
    # Under a name of its own: a build of the podman tests elsewhere meanwhile removes the
    # older lp-k8s-test tags, and this run's next pods then had no image to start.
    image = built.replace('lp-k8s-test', 'lp-k8s-faults')
    podman('tag', built, image)
    try:
        result = _runs(PODMAN_KEY, PODMAN_RUNS, tmp_path, runtime=SharedTmpPodman(),
                       image=image, path=PODMAN_PATH)
    finally:
        podman('untag', image, image, check=False)
    left = [name for name in podman('pod', 'ps', '--filter', 'label=launchpad-py/program',
                                    '--format', '{{.Name}}').stdout.split()
            if name.startswith('fault-run-')]  # Not other tests' pods, running meanwhile.
    result['summary'].update(image=image, podman_pods_left_at_end=len(left))
    _record(PODMAN_KEY, result)
    assert not left, left
    _assert_clean(result)


def test_deleted_params_pod_comes_back_and_no_update_is_lost_or_doubled(tmp_path):
    """The parameter server's pod deleted through the API mid-run: a new pod takes over
    from the log, the program finishes, every acknowledged update is applied exactly once,
    and no process, container or API object is left."""
    run = kube_run(random.Random(1), str(tmp_path), plan=('params', 'delete'), delay=3.0)
    assert run['fault']['kind'] == 'delete' and run['ended'] == 'finished', run
    # Its restarts are all reschedulings (restart_reasons 'deleted'): none counted against
    # max_restarts, as the launcher's log says.
    assert run['rescheduled'] >= 1 and run['restarts']['params/0'] == run['rescheduled'], run
    assert not any(_kube_problems(run).values()), _kube_problems(run)


def test_evicted_coordinator_pod_stops_the_program(tmp_path):
    """The coordinator's pod evicted (no restart policy): the program fails naming it, within
    the grace period + 1 s, and nothing is left in the cluster or on the machine."""
    run = kube_run(random.Random(2), str(tmp_path), plan=('coordinator', 'evict'), delay=3.0)
    assert run['fault']['kind'] == 'evict' and run['ended'] == 'failed:coordinator', run
    assert 'Evicted' in run['why'], run
    assert not any(_kube_problems(run).values()), _kube_problems(run)
