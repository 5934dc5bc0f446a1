"""The fake cluster's controllers: scheduler, kubelet, Job (pods, retries, deadline) and TTL.

The scheduler places a pod on the first node whose labels match its
``nodeSelector`` and that has the GPUs it asks for, or marks it Unschedulable
with the scheduler's message; an image the cluster lacks leaves it in
ImagePullBackOff. The kubelet runs containers with a runtime of
``runtimes.py`` (local processes, or podman) in the node's network namespace,
and ends them when their pod is deleted (SIGTERM, then SIGKILL after the grace).
The Job controller runs a Job's pod (``parallelism`` 1, unless 0 or
``suspend``), makes a new one after a failed one up to ``backoffLimit``
times (no backoff delay), and marks the Job Complete or Failed.
"""

from __future__ import annotations

import base64
import ctypes
import dataclasses
import datetime
import os
import secrets
import socket
import subprocess
import threading
import time

from fake_kube.store import ApiError, Store, now



@dataclasses.dataclass
class FakeNode:
    """A node pods can be scheduled on; ``netns`` is the network namespace its pods run in;
    ``cordoned``: new pods go elsewhere (``kubectl cordon``), those it runs stay;
    ``pod_ip``, if given, the podIP its pods report (an address this machine has no route
    to stands for a pod network that is not routed to the user's machine)."""

    name: str
    labels: dict = dataclasses.field(default_factory=dict)
    gpus: int = 0
    netns: str | None = None
    cordoned: bool = False
    pod_ip: str | None = None


class LogSource:
    """A pod's log file, read while its process may still write it."""

    def __init__(self, path: str, ended: threading.Event):
        self.path, self.ended = path, ended

    def read(self, follow: bool, closing: threading.Event):
        with open(self.path, 'rb') as log:
            while True:
                ended = self.ended.is_set()
                data = log.read(65536)
                if data:
                    yield data
                elif not follow or ended or closing.is_set():
                    return
                else:
                    self.ended.wait(0.05)  # Tailing a file: nothing announces a new line.


class Kubelet:
    """Schedules pods on ``nodes``, runs their containers, and runs the Job controllers."""

    def __init__(self, store: Store, nodes: list[FakeNode], images: set[str], workdir: str,
                 runtime):
        self.store, self.nodes, self.images, self.workdir = store, nodes, images, workdir
        #: Runs containers: ``runtimes.ProcessRuntime()`` or ``runtimes.PodmanRuntime()``.
        self.runtime = runtime
        self._handles: dict[tuple[str, str], object] = {}
        self._reapers: list[threading.Thread] = []  # Each reports its pod's end, then cleans up.
        self._ended: dict[tuple[str, str], threading.Event] = {}
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._seen: set[str] = set()
        self._held: dict[str, threading.Event] = {}  # Name part -> set when it may start.
        store.on_pod_deleted = self._pod_deleted
        self._thread = threading.Thread(target=self._loop, name='fake-kube-controllers',
                                        daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        # Woken by every change of the store (a pod created, a Job resumed, a pod ended): a
        # 0.1 s poll had each pod wait 50 ms on average, a Job's pod twice that. The timeout
        # runs the time-driven parts (deadlines, TTLs) and releases held pods.
        seen = 0
        while not self._closing.is_set():
            seen = self.store.wait_for_change(seen, 0.1)
            if self._closing.is_set():
                return
            pods, _ = self.store.list('pods', None)
            for pod in pods:
                if pod['metadata']['uid'] not in self._seen and not self._held_back(pod):
                    self._seen.add(pod['metadata']['uid'])
                    self._schedule(pod)
            self._run_job_controllers()

    def hold(self, name_part: str) -> threading.Event:
        """Pods whose name holds ``name_part`` stay unscheduled until the returned event is
        set: a test's way to keep one node from dialing back while the others have."""
        release = self._held[name_part] = threading.Event()
        return release

    def _held_back(self, pod: dict) -> bool:
        return any(part in pod['metadata']['name'] and not release.is_set()
                   for part, release in list(self._held.items()))

    # -- scheduler and kubelet -------------------------------------------------------

    def _unschedulable(self, pod: dict) -> str | None:
        selector = pod['spec'].get('nodeSelector') or {}
        container = pod['spec']['containers'][0]
        gpus = int(((container.get('resources') or {}).get('limits') or {}).get(
            'nvidia.com/gpu', 0))
        fits = [n for n in self.nodes if not n.cordoned
                and all(n.labels.get(k) == v for k, v in selector.items())]
        if not fits:
            return (f"0/{len(self.nodes)} nodes are available: {len(self.nodes)} node(s) didn't "
                    "match Pod's node affinity/selector.")
        if not any(n.gpus >= gpus for n in fits):
            return f'0/{len(self.nodes)} nodes are available: Insufficient nvidia.com/gpu.'
        return None

    def _container(self, pod: dict, state: dict) -> list[dict]:
        """``containerStatuses`` with the fields the API requires (the client checks them)."""
        return [{'name': 'node', 'image': pod['spec']['containers'][0]['image'], 'imageID': '',
                 'ready': 'running' in state, 'restartCount': 0, 'state': state}]

    def _set_status(self, pod: dict, **status) -> None:
        meta = pod['metadata']
        try:
            self.store.update('pods', meta['namespace'], meta['name'],
                              lambda obj: obj['status'].update(status))
        except ApiError:  # Deleted meanwhile.
            pass

    def _schedule(self, pod: dict) -> None:
        why = self._unschedulable(pod)
        if why is not None:
            self._set_status(pod, phase='Pending', conditions=[{
                'type': 'PodScheduled', 'status': 'False', 'reason': 'Unschedulable',
                'message': why}])
            return
        node = next(n for n in self.nodes if not n.cordoned and all(
            n.labels.get(k) == v for k, v in (pod['spec'].get('nodeSelector') or {}).items()))
        image = pod['spec']['containers'][0]['image']
        if image not in self.images:
            self._set_status(pod, phase='Pending', containerStatuses=self._container(pod, {
                'waiting': {'reason': 'ImagePullBackOff',
                            'message': f'Back-off pulling image "{image}"'}}))
            return
        self._start(pod, node)

    def _secret_files(self, pod: dict) -> dict[str, dict[str, bytes]]:
        """Per mount path, the files of the Secret mounted there (as the kubelet reads them)."""
        volumes = {v['name']: v for v in pod['spec'].get('volumes') or ()}
        files = {}
        for mount in pod['spec']['containers'][0].get('volumeMounts') or ():
            secret = volumes[mount['name']]['secret']['secretName']
            data = self.store.get('secrets', pod['metadata']['namespace'], secret)['data']
            files[mount['mountPath']] = {k: base64.b64decode(v) for k, v in data.items()}
        return files

    def _start(self, pod: dict, node: FakeNode) -> None:
        meta = pod['metadata']
        key = (meta['namespace'], meta['name'])
        directory = os.path.join(self.workdir, meta['uid'])
        os.makedirs(directory)
        try:
            handle = self.runtime.start(pod, node.netns, self._secret_files(pod), directory,
                                        os.path.join(directory, 'log'))
        except (ApiError, subprocess.SubprocessError) as exc:
            # A podman call that timed out (kube play under load) may have made the pod
            # anyway: the runtime removes what it made, and this loop goes on with the
            # next pods (it died here before, and no pod started after).
            getattr(self.runtime, 'discard', lambda name: None)(meta['name'])
            message = getattr(exc, 'stderr', None) or str(exc)
            self._set_status(pod, phase='Pending', containerStatuses=self._container(pod, {
                'waiting': {'reason': 'CreateContainerError', 'message': message.strip()}}))
            return
        with self._lock:
            self._handles[key] = handle
            self._ended[key] = threading.Event()
        try:
            self.store.update('pods', *key, lambda obj: obj['spec'].update(nodeName=node.name))
        except ApiError:  # Deleted while its container started (a podman pod takes seconds).
            threading.Thread(target=handle.terminate, args=(0,), daemon=True).start()
        self._set_status(pod, phase='Running', conditions=[{'type': 'PodScheduled',
                                                            'status': 'True'}],
                         **({'podIP': node.pod_ip} if node.pod_ip else {}),
                         containerStatuses=self._container(pod, {
                             'running': {'startedAt': now()}}))
        reaper = threading.Thread(target=self._reap, args=(pod, key, handle),
                                  name=f'fake-kube-{meta["name"]}', daemon=True)
        reaper.start()
        self._reapers.append(reaper)

    def _reap(self, pod: dict, key, handle) -> None:
        code = handle.wait()
        self._ended[key].set()
        self._set_status(pod, phase='Succeeded' if code == 0 else 'Failed',
                         containerStatuses=self._container(pod, {'terminated': {
                             'exitCode': code, 'reason': 'Completed' if code == 0 else 'Error'}}))
        # Reported first, cleaned up after, as a kubelet does: removing a podman pod takes
        # seconds under load, and the launcher heard of a node's end only after that.
        getattr(handle, 'remove', lambda: None)()

    def log_source(self, namespace: str, name: str) -> LogSource:
        pod = self.store.get('pods', namespace, name)
        with self._lock:
            ended = self._ended.get((namespace, name))
        if ended is None:
            raise ApiError(400, 'BadRequest', f'container "node" in pod "{name}" is waiting to '
                                              'start: ContainerCreating')
        return LogSource(os.path.join(self.workdir, pod['metadata']['uid'], 'log'), ended)

    def connect(self, namespace: str, name: str, port: int) -> socket.socket:
        """A connection to ``port`` on the loopback of a running pod (its node's network
        namespace), as the kubelet opens for ``pods/portforward``."""
        pod = self.store.get('pods', namespace, name)
        with self._lock:
            ended = self._ended.get((namespace, name))
        if ended is None or ended.is_set():
            raise ApiError(400, 'BadRequest', f'pod {name} is not running')
        node = next(n for n in self.nodes if n.name == pod['spec'].get('nodeName'))
        if node.netns is None:
            return socket.create_connection(('127.0.0.1', port), timeout=10)
        return _connect_in(node.netns, port)

    def container_pid(self, namespace: str, name: str) -> int | None:
        """The pid of pod ``name``'s running container on this machine, or None."""
        with self._lock:
            handle, ended = self._handles.get((namespace, name)), self._ended.get((namespace, name))
        return None if handle is None or ended.is_set() else handle.pid()

    def running(self) -> list[str]:
        """The names of the pods whose containers still run."""
        with self._lock:
            return sorted(key[1] for key, ended in self._ended.items() if not ended.is_set())

    def evict(self, namespace: str, name: str, reason: str = 'Evicted',
              message: str = 'The node was low on resource: memory.') -> None:
        """What a kubelet under node pressure does: fails the pod with ``reason`` and kills
        its container at once (the pod object stays, as evicted pods do)."""
        pod = self.store.get('pods', namespace, name)
        self._set_status(pod, phase='Failed', reason=reason, message=message)
        with self._lock:
            handle = self._handles.get((namespace, name))
        if handle is not None:
            handle.kill()

    def _pod_deleted(self, pod: dict) -> None:
        key = (pod['metadata']['namespace'], pod['metadata']['name'])
        with self._lock:
            handle, ended = self._handles.get(key), self._ended.get(key)
        if handle is not None and not ended.is_set():
            grace = pod['spec'].get('terminationGracePeriodSeconds', 30)
            threading.Thread(target=handle.terminate, args=(grace,),
                             name=f'fake-kube-kill-{key[1]}', daemon=True).start()

    # -- Job controller (deadline) and TTL-after-finished controller -------------------

    def _run_job_controllers(self) -> None:
        jobs, _ = self.store.list('jobs', None)
        for job in jobs:
            meta, spec, status = job['metadata'], job['spec'], job.get('status') or {}
            started = _seconds_since(status.get('startTime') or meta['creationTimestamp'])
            finished = [c for c in status.get('conditions') or ()
                        if c['type'] in ('Failed', 'Complete')]
            if not finished and not spec.get('suspend') and spec.get('parallelism', 1):
                self._run_job_pods(job)
            if not finished and started > spec.get('activeDeadlineSeconds', float('inf')):
                self.store.update('jobs', meta['namespace'], meta['name'], lambda obj: obj[
                    'status'].update(conditions=[{'type': 'Failed', 'status': 'True',
                                                  'reason': 'DeadlineExceeded',
                                                  'lastTransitionTime': now()}]))
            elif finished and spec.get('ttlSecondsAfterFinished') is not None and _seconds_since(
                    finished[0]['lastTransitionTime']) >= spec['ttlSecondsAfterFinished']:
                try:
                    self.store.delete('jobs', meta['namespace'], meta['name'])
                except ApiError:
                    pass
            elif not status.get('startTime'):
                self.store.update('jobs', meta['namespace'], meta['name'],
                                  lambda obj: obj['status'].update(startTime=now()))

    def _run_job_pods(self, job: dict) -> None:
        """One pod at a time: a new one while failures are within ``backoffLimit``."""
        meta = job['metadata']
        pods, _ = self.store.list('pods', meta['namespace'], f'controller-uid={meta["uid"]}')
        phases = [(p.get('status') or {}).get('phase') for p in pods]
        if any(phase not in ('Succeeded', 'Failed') for phase in phases):
            return  # One is pending or running.
        failed = phases.count('Failed')
        condition = None
        if 'Succeeded' in phases:
            condition = {'type': 'Complete', 'status': 'True'}
        elif failed > job['spec'].get('backoffLimit', 6):
            condition = {'type': 'Failed', 'status': 'True', 'reason': 'BackoffLimitExceeded'}
        if condition is not None:
            self.store.update('jobs', meta['namespace'], meta['name'], lambda obj: obj[
                'status'].update(conditions=[dict(condition, lastTransitionTime=now())],
                                 succeeded=phases.count('Succeeded'), failed=failed))
            return
        template = job['spec']['template']
        labels = {**(template.get('metadata') or {}).get('labels', {}),
                  'controller-uid': meta['uid'], 'job-name': meta['name']}
        self.store.create('pods', meta['namespace'], {
            'apiVersion': 'v1', 'kind': 'Pod', 'spec': template['spec'],
            'metadata': {'name': f'{meta["name"]}-{secrets.token_hex(3)[:5]}', 'labels': labels,
                         'ownerReferences': [{'apiVersion': 'batch/v1', 'kind': 'Job',
                                              'name': meta['name'], 'uid': meta['uid'],
                                              'controller': True}]}})

    def close(self) -> None:
        """Stops the controllers and ends every container still running; then the runtime
        removes whatever it started that is still there (``sweep``), whatever happened to
        the handles: a podman call that hung or timed out under load left pods before."""
        self._closing.set()
        self._thread.join(_START_S)  # A container starting now is then known (or discarded).
        with self._lock:
            running = [h for key, h in self._handles.items() if not self._ended[key].is_set()]
        for handle in running:
            try:
                handle.terminate(0)
            except subprocess.SubprocessError:
                pass  # The sweep below removes it.
        deadline = time.monotonic() + 60
        for reaper in self._reapers:  # Their clean-up done: no podman pod outlives the cluster.
            reaper.join(max(0.0, deadline - time.monotonic()))
        getattr(self.runtime, 'sweep', lambda: None)()


#: How long starting one container may take (podman's own calls time out at 120 s).
_START_S = 150


def _seconds_since(timestamp: str) -> float:
    then = datetime.datetime.strptime(timestamp, '%Y-%m-%dT%H:%M:%SZ').replace(
        tzinfo=datetime.timezone.utc)
    return time.time() - then.timestamp()


def _connect_in(netns: str, port: int) -> socket.socket:
    """Connects to 127.0.0.1:``port`` of network namespace ``netns``: setns(2) moves only the
    calling thread, so a thread of its own enters the namespace and ends there."""
    found: list = []

    def enter_and_connect() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            with open(f'/run/netns/{netns}') as handle:
                if libc.setns(handle.fileno(), 0x40000000) != 0:  # CLONE_NEWNET
                    raise OSError(ctypes.get_errno(), f'setns into {netns} failed')
            found.append(socket.create_connection(('127.0.0.1', port), timeout=10))
        except OSError as exc:
            found.append(exc)

    thread = threading.Thread(target=enter_and_connect, name=f'fake-kube-netns-{netns}')
    thread.start()
    thread.join()
    if isinstance(found[0], OSError):
        raise found[0]
    return found[0]
