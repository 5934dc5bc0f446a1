"""Kubernetes launches of 100 to 1,000 nodes against the fake API server: created, ready, stop.

    python -m bench.scale_kubernetes --json bench/scale_kubernetes.json            # 100, 300
    python -m bench.scale_kubernetes --nodes 1000 --json bench/scale_kubernetes_1000.json
    python -m bench.scale_kubernetes --nodes 300 --create_concurrency 1 --json ...  # serial
    python -m bench.scale_kubernetes --nodes 1000 --nodes_per_pod 10 50 \
        --merge bench/scale_kubernetes.json                  # packed: 100 and 20 pods

No Kubernetes API server runs here: the launcher talks to ``tests/fake_kube``
through the official client over real HTTP, and the fake kubelet runs each
pod as a local process (no network namespace), which dials back to the
launcher on 127.0.0.1, at ``nice 10`` (real pods run on other machines; here
hundreds of interpreters starting at once would starve the launcher's
heartbeat on 2 cores, and the nodes end themselves). Each point launches one group of N ``PyNode``s that
wait for the stop, packed ``nodes_per_pod`` to a pod (1: a pod each; more: a
pod agent per pod forks its nodes, see ``launchers/kubernetes/packing.py``), and records:

- created: from the ``lp.launch`` call until the fake API server stored the
  last pod (the launcher's creates go ``create_concurrency`` at a time);
- ready: until ``lp.launch`` returned (every pod ran, dialed back, got its
  executable and reported ready);
- stop: ``controller.stop()`` until every node ended, and how many nodes the stop killed
  at the end of its grace period (``killed_at_grace_end``);
- API requests by kind: pod creates, pod listings, watches, log follows, and
  gets of a single pod (per-pod polling would show there: it is 0);
- peak RSS, PSS and USS: the largest sums of resident memory over this process and
  every process below it (the pods), sampled every half second by a process of its own. RSS counts shared
  pages in each process (an upper bound, far too high for packed pods, whose
  nodes are forks of one agent); PSS splits them among their sharers; USS counts
  only each process's own pages (what ending it would free);
- one pod's memory once every node is ready: the median USS, PSS and RSS (MiB) of up to
  40 pod processes (``remote_node_main``, or a packed pod's agent without its forks).

A launch that fails is recorded too (``failed``: its error), and every point
carries the date and commit of its run; ``--merge`` keeps a file's earlier
points beside the new ones.

The fake API server and its kubelet run in a process of their own (in the
launcher's, their threads starved its heartbeat); they share the machine's
CPUs with the launcher and the pods, and others may share it too (the load
is recorded).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time

import psutil

import launchpad_py as lp

TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'tests')
sys.path.insert(0, TESTS)  # fake_kube and the node function live with the tests.

from fake_kube import IMAGE, FakeCluster, FakeNode  # noqa: E402
from fake_kube.runtimes import ProcessRuntime  # noqa: E402
from nodes_for_tests import serve_forever  # noqa: E402


def sample_memory(root: int) -> None:
    """``--sample_memory PID``, in a process of its own (reading a thousand processes' page
    maps in the launcher would take CPU from its heartbeat): says ``ready``, then every
    half second the RSS, PSS and USS sums over PID and every process below it, until stdin
    closes; then prints the peaks (a pass over a thousand processes takes longer than
    that on a loaded machine: the next starts when it ends)."""
    peak, ended = [0, 0, 0], threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), ended.set()), daemon=True).start()
    os.nice(19)  # Measures; never competes with the launcher for a core.
    me, top = psutil.Process(), psutil.Process(root)
    print('ready', flush=True)
    while not ended.wait(0.5):
        rss = pss = uss = 0
        for process in [top, *top.children(recursive=True)]:
            if process.pid == me.pid:
                continue
            try:
                memory = process.memory_full_info()
            except psutil.Error:
                continue
            rss, pss, uss = rss + memory.rss, pss + memory.pss, uss + memory.uss
        peak = [max(peak[0], rss), max(peak[1], pss), max(peak[2], uss)]
    print(json.dumps(peak), flush=True)


def pod_memory(root: int, most: int = 40) -> dict:
    """Median USS, PSS and RSS in MiB of up to ``most`` of ``root``'s pod processes (a
    pod's first process: its node, or a packed pod's agent)."""
    rows = []
    for process in psutil.Process(root).children(recursive=True):
        try:
            if 'launchpad_py.node_side.' not in ' '.join(process.cmdline()):
                continue
            memory = process.memory_full_info()
        except psutil.Error:
            continue
        rows.append((memory.uss, memory.pss, memory.rss))
        if len(rows) == most:
            break
    if not rows:
        return {}
    middle = [sorted(column)[len(rows) // 2] for column in zip(*rows)]
    return {f'pod_{name}_mib': round(value / 2**20, 1)
            for name, value in zip(('uss', 'pss', 'rss'), middle)} | {'pods_measured': len(rows)}


def _requests(calls: list[tuple]) -> dict[str, int]:
    """The fake API server's requests about pods, by kind."""
    kinds = collections.Counter()
    for method, resource, named, log, watch in list(calls):
        if resource != 'pods':
            continue
        if method == 'POST':
            kinds['create'] += 1
        elif log:
            kinds['log'] += 1
        elif watch:
            kinds['watch'] += 1
        elif named and method == 'GET':
            kinds['get_one'] += 1
        elif method == 'GET':
            kinds['list'] += 1
        elif method == 'DELETE':
            kinds['delete'] += 1
    return dict(kinds)


def serve_fake(workdir: str) -> None:
    """The fake cluster, in a process of its own (``--serve_fake``): prints its kubeconfig,
    runs until stdin closes, then prints when each pod was created and its API requests."""
    with FakeCluster(workdir, [FakeNode('local')], runtime=ProcessRuntime(nice=10)) as cluster:
        created: list[float] = []
        store_create = cluster.store.create

        def create(resource, namespace, obj):
            stored = store_create(resource, namespace, obj)
            if resource == 'pods':
                created.append(time.time())
            return stored

        cluster.store.create = create
        print(cluster.kubeconfig, flush=True)
        sys.stdin.read()
        print(json.dumps({'created': created, 'requests': _requests(cluster.server.calls)}),
              flush=True)


def run_point(nodes: int, concurrency: int, workdir: str, per_pod: int = 1) -> dict:
    fake = subprocess.Popen([sys.executable, '-m', 'bench.scale_kubernetes', '--serve_fake',
                             workdir], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            cwd=os.path.dirname(TESTS))
    try:
        os.environ['KUBECONFIG'] = fake.stdout.readline().strip()
        program = lp.Program(f'k8s{nodes}')
        with program.group('node'):
            for _ in range(nodes):
                program.add_node(lp.PyNode(serve_forever))
        sampler = subprocess.Popen([sys.executable, '-m', 'bench.scale_kubernetes',
                                    '--sample_memory', str(os.getpid())], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True, cwd=os.path.dirname(TESTS))
        sampler.stdout.readline()  # Sampling before the launch: a short one is seen too.
        try:
            start = time.time()
            controller = lp.launch(program, launch_type='kubernetes',
                                   resources={'node': lp.KubernetesResources(
                                       image=IMAGE, nodes_per_pod=per_pod)},
                                   kubernetes_options={'launcher_address': '127.0.0.1',
                                                       'create_concurrency': concurrency})
            ready = time.time() - start
            one_pod = pod_memory(os.getpid())
            stopping = time.time()
            controller.stop()
            controller.wait(timeout=600)
            stop = time.time() - stopping
            killed = len(controller.killed_nodes)
        finally:
            peak = json.loads(sampler.communicate('', timeout=120)[0])
    finally:
        out, _ = fake.communicate('', timeout=120)
    seen = json.loads(out.strip().splitlines()[-1])
    pods = -(-nodes // per_pod)
    return {'nodes': nodes, 'nodes_per_pod': per_pod, 'pods': pods,
            'create_concurrency': concurrency,
            'created_s': round(seen['created'][pods - 1] - start, 2), 'ready_s': round(ready, 2),
            'ready_per_node_ms': round(1000 * ready / nodes, 2), 'stop_s': round(stop, 2),
            'killed_at_grace_end': killed,
            'peak_rss_gib': round(peak[0] / 2**30, 2), 'peak_pss_gib': round(peak[1] / 2**30, 2),
            'peak_uss_gib': round(peak[2] / 2**30, 2), **one_pod,
            'api_requests': seen['requests']}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--nodes', type=int, nargs='+', default=[100, 300])
    parser.add_argument('--create_concurrency', type=int, default=16)
    parser.add_argument('--nodes_per_pod', type=int, nargs='+', default=[1],
                        help='each point runs with each of these')
    parser.add_argument('--json', help='write the results here')
    parser.add_argument('--merge', metavar='JSON', help='add the points to this file (its '
                        'earlier points stay: each carries the date and commit of its run)')
    parser.add_argument('--serve_fake', metavar='WORKDIR', help=argparse.SUPPRESS)
    parser.add_argument('--sample_memory', metavar='PID', type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake:
        return serve_fake(args.serve_fake)
    if args.sample_memory:
        return sample_memory(args.sample_memory)
    results = {'machine': {'cpus': os.cpu_count(), 'python': platform.python_version(),
                           'load_at_start': [round(x, 2) for x in os.getloadavg()],
                           'memory_gib': round(psutil.virtual_memory().total / 2**30, 1)},
               'points': []}
    for nodes in args.nodes:
        for per_pod in args.nodes_per_pod:
            load_before = [round(x, 2) for x in os.getloadavg()]
            with tempfile.TemporaryDirectory(prefix='lp-bench-k8s-') as workdir:
                try:
                    point = run_point(nodes, args.create_concurrency, workdir, per_pod)
                except Exception as exc:  # A failed launch is a result too (said, not dropped).
                    point = {'nodes': nodes, 'nodes_per_pod': per_pod,
                             'create_concurrency': args.create_concurrency,
                             'failed': f'{type(exc).__name__}: {exc}'[:400]}
            point.update(_run_id())
            point['load_before'] = load_before
            point['load_after'] = [round(x, 2) for x in os.getloadavg()]
            print(json.dumps(point), flush=True)
            results['points'].append(point)
    if args.merge:
        results = _merged(args.merge, results)
    for path in filter(None, (args.json, args.merge)):
        with open(path, 'w') as out:
            json.dump(results, out, indent=1)
            out.write('\n')


def _run_id() -> dict:
    """When, and on which commit, a point ran (``+changes``: with uncommitted changes)."""
    def git(*args: str) -> str:
        return subprocess.run(['git', *args], capture_output=True, text=True,
                              cwd=os.path.dirname(TESTS)).stdout.strip()
    commit = git('rev-parse', '--short', 'HEAD') or 'unknown'
    if git('status', '--porcelain', '--untracked-files=no', '--', '.', ':!bench/*.json'):
        commit += '+changes'
    return {'date': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()), 'commit': commit}


def _key(point: dict) -> tuple:
    return (point.get('nodes_per_pod', 1), point['nodes'], point['create_concurrency'],
            point.get('date', ''))


def _merged(path: str, results: dict) -> dict:
    """The points in ``path`` (a point without ``nodes_per_pod`` ran a pod per node) and
    ``results``' after them: earlier runs stay beside new ones (each point says its date and
    commit where it was recorded with them); each run's machine kept under its points."""
    try:
        with open(path) as old:
            kept = json.load(old)
    except FileNotFoundError:
        return results
    for point in kept['points']:
        point.setdefault('machine', kept.get('machine'))
    for point in results['points']:
        point['machine'] = results['machine']
    return {'machine': results['machine'],
            'points': sorted(kept['points'] + results['points'], key=_key)}


if __name__ == '__main__':
    main()
