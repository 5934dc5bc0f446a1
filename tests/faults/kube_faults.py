"""Fault runs under Kubernetes: the fault program's pods on a fake cluster, one hit per run.

    run = kube_run(random.Random(1), workdir)                       # pods as processes
    run = kube_run(rng, workdir, runtime=SharedTmpPodman(), image=tag)  # pods under podman

Each run gets a fake cluster of its own (``tests/fake_kube``: a real HTTP API
server, its kubelet running the pods on the namespace hosts h1..h3), in this process, not the launcher's:
the launcher is ``fault_launcher.py`` as for the other launchers, and its
heartbeat must not share a GIL with the API server. The fault strikes a
running pod of the program at a random moment: its container's process is
SIGKILLed or paused (SIGSTOP, a random pause, SIGCONT), or the pod is deleted
through the API (a preemption, ``kubectl delete pod``) or evicted by the
kubelet (node pressure). ``injector.one_run`` judges the run as for the other
launchers; this module adds what a cluster can leave behind: API objects
(Jobs, Secrets, Pods), containers the kubelet still runs, and under podman the
pods left after the cluster's close (and those only its final sweep removed).
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
import time

import launchpad_py as lp
from fake_kube import IMAGE, FakeCluster, FakeNode
from fake_kube.runtimes import PodmanRuntime, ProcessRuntime
from injector import CLEAN_S, HANG_S, LAUNCHER_IP, Fault, _pause, _signal, one_run

#: The image the launcher's pods run, and their PYTHONPATH (which holds ``fault_nodes``);
#: the launcher reads them: it runs in a process of its own.
IMAGE_ENV, PATH_ENV = 'LP_FAULT_K8S_IMAGE', 'LP_FAULT_K8S_PYTHONPATH'
_HERE = os.path.dirname(os.path.abspath(__file__))
#: Where the fault program's modules are: in this repository, and in the podman test image.
PROCESS_PATH = os.pathsep.join([os.path.dirname(os.path.dirname(_HERE)),
                                os.path.dirname(_HERE), _HERE])
PODMAN_PATH = '/app:/app/tests:/app/tests/faults'
NAMESPACE = 'default'
KINDS = ('kill', 'pause', 'delete', 'evict')
_NODE_NAME = 'launchpad-py/node-name'  # The annotation naming a pod's node ('label/index').


def resources(program: lp.Program) -> dict:
    """Every group on the image of ``IMAGE_ENV``, its processes marked with the run's token
    (so ``conftest.marked_processes`` finds them in their pods)."""
    env = {'LP_TEST_TOKEN': os.environ['LP_TEST_TOKEN'],
           'PYTHONPATH': os.environ.get(PATH_ENV, PROCESS_PATH)}
    return {group: lp.KubernetesResources(image=os.environ.get(IMAGE_ENV, IMAGE), env=env)
            for group in program.groups}


class SharedTmpPodman(PodmanRuntime):
    """Podman pods that see this machine's temporary directory at the same path: the fault
    program's parameter log, ledgers and result live in a run directory there."""

    def start(self, pod, netns, secrets, directory, log_path):
        shared = tempfile.gettempdir()
        pod = {**pod, 'spec': dict(pod['spec'])}
        spec = pod['spec']
        spec['volumes'] = [*(spec.get('volumes') or ()),
                           {'name': 'fault-run-tmp', 'hostPath': {'path': shared,
                                                                  'type': 'Directory'}}]
        container = dict(spec['containers'][0])
        container['volumeMounts'] = [*(container.get('volumeMounts') or ()),
                                     {'name': 'fault-run-tmp', 'mountPath': shared}]
        spec['containers'] = [container, *spec['containers'][1:]]
        return super().start(pod, netns, secrets, directory, log_path)


class PodFaults:
    """Picks a running pod of the program and strikes it; ``one_run``'s ``strike``."""

    def __init__(self, cluster: FakeCluster):
        self.cluster = cluster
        from kubernetes import client, config
        self._core = client.CoreV1Api(config.new_client_from_config(cluster.kubeconfig))

    def running_pods(self) -> list[tuple[str, str]]:
        """(pod name, 'label/index') of the program's pods whose containers run now."""
        running = set(self.cluster.kubelet.running())
        pods, _ = self.cluster.store.list('pods', NAMESPACE)
        return [(p['metadata']['name'], p['metadata']['annotations'][_NODE_NAME]) for p in pods
                if p['metadata']['name'] in running
                and _NODE_NAME in (p['metadata'].get('annotations') or {})]

    def _first_pods(self, launcher, group: str | None) -> list[tuple[str, str]]:
        """The running pods (of ``group`` if given), waiting for the first (not past the launch)."""
        deadline = time.monotonic() + HANG_S
        while True:
            pods = [p for p in self.running_pods() if group in (None, p[1].split('/')[0])]
            if pods or launcher.poll() is not None or time.monotonic() > deadline:
                return pods
            threading.Event().wait(0.01)  # Polling the cluster: pods start unannounced.

    def __call__(self, rng, launcher, run_dir: str, launch_type: str,
                 plan: tuple[str, str] | None = None) -> Fault:
        pods = self._first_pods(launcher, plan[0] if plan is not None else None)
        kind = plan[1] if plan is not None else rng.choice(KINDS)
        if not pods:
            return Fault(plan[0] if plan else 'node', 'missed', at=time.monotonic())
        pod, name = rng.choice(pods)
        fault = Fault(name, kind, at=time.monotonic())
        if not self._strike(rng, pod, fault):
            fault.kind = 'missed'  # The pod had ended (or was being replaced) already.
        return fault

    def _strike(self, rng, pod: str, fault: Fault) -> bool:
        from kubernetes.client.exceptions import ApiException
        if fault.kind == 'delete':
            try:
                self._core.delete_namespaced_pod(pod, NAMESPACE)
                return True
            except ApiException:
                return False
        if fault.kind == 'evict':
            self.cluster.kubelet.evict(NAMESPACE, pod)
            return True
        pid = self.cluster.kubelet.container_pid(NAMESPACE, pod)
        if pid is None:
            return False
        if fault.kind == 'kill':
            return _signal(pid, signal.SIGKILL)
        fault.pause_s = rng.uniform(0.2, 3.0)
        return _pause(pid, fault.pause_s)


def _left_in(cluster: FakeCluster) -> tuple[int, int]:
    """API objects and running containers left, waiting up to ``CLEAN_S`` for them to go."""
    deadline = time.monotonic() + CLEAN_S
    while (cluster.objects(NAMESPACE) or cluster.kubelet.running()) \
            and time.monotonic() < deadline:
        threading.Event().wait(0.1)  # Polling: deletions cascade without announcing it.
    return len(cluster.objects(NAMESPACE)), len(cluster.kubelet.running())


def hosts() -> list[FakeNode]:
    """The cluster's nodes: the namespace hosts h1..h3 (pods there reach each other and the
    launcher over the bridge; processes on one loopback could not be told apart by address)."""
    return [FakeNode(f'h{i}', netns=f'lp-h{i}') for i in (1, 2, 3)]


def kube_run(rng, workdir: str, runtime=None, image: str = IMAGE, path: str = PROCESS_PATH,
             plan: tuple[str, str] | None = None, delay: float | None = None) -> dict:
    """One fault run on a fresh fake cluster whose API server listens on the bridge (the
    launcher's route to it is then the pods' way back); ``runtime``: local processes by default;
    ``one_run``'s result plus ``objects_left``, ``containers_left`` and ``rescheduled``."""
    os.makedirs(workdir, exist_ok=True)
    with FakeCluster(workdir, hosts(), images=(image,), runtime=runtime or ProcessRuntime(),
                     api_host=LAUNCHER_IP) as cluster:
        run = one_run(rng, 'kubernetes', [], plan=plan, delay=delay, strike=PodFaults(cluster),
                      env={'KUBECONFIG': cluster.kubeconfig, IMAGE_ENV: image, PATH_ENV: path})
        run['objects_left'], run['containers_left'] = _left_in(cluster)
    if hasattr(cluster.kubelet.runtime, 'left'):  # Podman: pods left even after the sweep
        # (a fault), and those only the sweep removed (their handles had lost them).
        run['podman_left'] = len(cluster.kubelet.runtime.left())
        run['podman_swept'] = len(cluster.kubelet.runtime.swept)
    run['rescheduled'] = rescheduled(run['run_dir'])
    return run


def rescheduled(run_dir: str) -> int:
    """Pods the launcher started again without counting a restart (deleted or evicted ones),
    as its log says."""
    with open(os.path.join(run_dir, 'launcher.log'), errors='replace') as log:
        return sum('not counted against max_restarts' in line for line in log)
