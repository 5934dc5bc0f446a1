"""The fake cluster's controllers: scheduler, kubelet, Job deadline and TTL-after-finished.

The "image" is this machine's Python environment and the repository (the
kubelet puts them first on PATH and PYTHONPATH), so a container's command
runs as a real local process: in the network namespace of its fake node
(``ip netns exec lp-h1``) when it has one. A Secret volume is written to a
directory of the pod's, and environment values under its mount path point
there instead (the fake cannot mount). Deleting a pod sends its process
group SIGTERM, then SIGKILL after ``gracePeriodSeconds``.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import os
import signal
import subprocess
import sys
import threading
import time

from fake_kube.store import ApiError, Store, now

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclasses.dataclass
class FakeNode:
    """A node pods can be scheduled on; ``netns`` is the network namespace its pods run in."""

    name: str
    labels: dict = dataclasses.field(default_factory=dict)
    gpus: int = 0
    netns: str | None = None


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

    def __init__(self, store: Store, nodes: list[FakeNode], images: set[str], workdir: str):
        self.store, self.nodes, self.images, self.workdir = store, nodes, images, workdir
        self._processes: dict[tuple[str, str], subprocess.Popen] = {}
        self._ended: dict[tuple[str, str], threading.Event] = {}
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._seen: set[str] = set()
        store.on_pod_deleted = self._pod_deleted
        self._thread = threading.Thread(target=self._loop, name='fake-kube-controllers',
                                        daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._closing.wait(0.1):
            pods, _ = self.store.list('pods', None)
            for pod in pods:
                if pod['metadata']['uid'] not in self._seen:
                    self._seen.add(pod['metadata']['uid'])
                    self._schedule(pod)
            self._run_job_controllers()

    # -- scheduler and kubelet -------------------------------------------------------

    def _unschedulable(self, pod: dict) -> str | None:
        selector = pod['spec'].get('nodeSelector') or {}
        container = pod['spec']['containers'][0]
        gpus = int(((container.get('resources') or {}).get('limits') or {}).get(
            'nvidia.com/gpu', 0))
        fits = [n for n in self.nodes if all(n.labels.get(k) == v for k, v in selector.items())]
        if not fits:
            return (f"0/{len(self.nodes)} nodes are available: {len(self.nodes)} node(s) didn't "
                    "match Pod's node affinity/selector.")
        if not any(n.gpus >= gpus for n in fits):
            return f'0/{len(self.nodes)} nodes are available: Insufficient nvidia.com/gpu.'
        return None

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
        node = next(n for n in self.nodes if all(
            n.labels.get(k) == v for k, v in (pod['spec'].get('nodeSelector') or {}).items()))
        image = pod['spec']['containers'][0]['image']
        if image not in self.images:
            self._set_status(pod, phase='Pending', containerStatuses=[{'name': 'node', 'state': {
                'waiting': {'reason': 'ImagePullBackOff',
                            'message': f'Back-off pulling image "{image}"'}}}])
            return
        self._start(pod, node)

    def _environment(self, pod: dict, mounts: dict[str, str]) -> dict[str, str]:
        env = {'PATH': f'{os.path.dirname(sys.executable)}:/usr/bin:/bin',
               'PYTHONPATH': f'{REPO}:{REPO}/tests', 'HOME': self.workdir}
        for item in pod['spec']['containers'][0].get('env') or ():
            value = item['value']
            for mount_path, local in mounts.items():
                if value.startswith(mount_path):
                    value = local + value[len(mount_path):]
            env[item['name']] = value
        return env

    def _mount_secrets(self, pod: dict, directory: str) -> dict[str, str]:
        mounts = {}
        volumes = {v['name']: v for v in pod['spec'].get('volumes') or ()}
        for mount in pod['spec']['containers'][0].get('volumeMounts') or ():
            secret = volumes[mount['name']]['secret']
            data = self.store.get('secrets', pod['metadata']['namespace'],
                                  secret['secretName'])['data']
            local = os.path.join(directory, mount['name'])
            os.makedirs(local)
            for key, value in data.items():
                with open(os.open(os.path.join(local, key), os.O_WRONLY | os.O_CREAT,
                                  secret.get('defaultMode', 0o644)), 'wb') as out:
                    out.write(base64.b64decode(value))
            mounts[mount['mountPath']] = local
        return mounts

    def _start(self, pod: dict, node: FakeNode) -> None:
        meta = pod['metadata']
        key = (meta['namespace'], meta['name'])
        directory = os.path.join(self.workdir, meta['uid'])
        os.makedirs(directory)
        env = self._environment(pod, self._mount_secrets(pod, directory))
        container = pod['spec']['containers'][0]
        argv = list(container['command'])
        if node.netns:
            argv = ['ip', 'netns', 'exec', node.netns] + argv
        with open(os.path.join(directory, 'log'), 'wb') as log:
            process = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=subprocess.STDOUT, start_new_session=True,
                                       cwd=container.get('workingDir') or REPO)
        with self._lock:
            self._processes[key] = process
            self._ended[key] = threading.Event()
        self._set_status(pod, phase='Running', conditions=[{'type': 'PodScheduled', 'status': 'True'}],
                         containerStatuses=[{'name': 'node', 'state': {
                             'running': {'startedAt': now()}}}])
        self.store.update('pods', *key, lambda obj: obj['spec'].update(nodeName=node.name))
        threading.Thread(target=self._reap, args=(pod, key, process),
                         name=f'fake-kube-{meta["name"]}', daemon=True).start()

    def _reap(self, pod: dict, key, process: subprocess.Popen) -> None:
        code = process.wait()
        self._ended[key].set()
        reason = 'Completed' if code == 0 else 'Error'
        self._set_status(pod, phase='Succeeded' if code == 0 else 'Failed', containerStatuses=[
            {'name': 'node', 'state': {'terminated': {
                'exitCode': code if code >= 0 else 128 - code, 'reason': reason}}}])

    def log_source(self, namespace: str, name: str) -> LogSource:
        pod = self.store.get('pods', namespace, name)
        with self._lock:
            ended = self._ended.get((namespace, name))
        if ended is None:
            raise ApiError(400, 'BadRequest', f'container "node" in pod "{name}" is waiting to '
                                              'start: ContainerCreating')
        return LogSource(os.path.join(self.workdir, pod['metadata']['uid'], 'log'), ended)

    def _pod_deleted(self, pod: dict) -> None:
        key = (pod['metadata']['namespace'], pod['metadata']['name'])
        with self._lock:
            process = self._processes.get(key)
        if process is not None and process.poll() is None:
            grace = pod['spec'].get('terminationGracePeriodSeconds', 30)
            threading.Thread(target=_terminate, args=(process, grace),
                             name=f'fake-kube-kill-{key[1]}', daemon=True).start()

    # -- Job controller (deadline) and TTL-after-finished controller -------------------

    def _run_job_controllers(self) -> None:
        jobs, _ = self.store.list('jobs', None)
        for job in jobs:
            meta, spec, status = job['metadata'], job['spec'], job.get('status') or {}
            started = _seconds_since(status.get('startTime') or meta['creationTimestamp'])
            finished = [c for c in status.get('conditions') or () if c['type'] == 'Failed']
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

    def close(self) -> None:
        self._closing.set()
        self._thread.join(10)
        with self._lock:
            processes = list(self._processes.values())
        for process in processes:
            if process.poll() is None:
                _terminate(process, 0)


def _seconds_since(timestamp: str) -> float:
    then = datetime.datetime.strptime(timestamp, '%Y-%m-%dT%H:%M:%SZ').replace(
        tzinfo=datetime.timezone.utc)
    return time.time() - then.timestamp()


def _terminate(process: subprocess.Popen, grace: float) -> None:
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue
