"""How the fake kubelet runs a pod's container: as a local process, or as a real pod under podman.

``ProcessRuntime``: the "image" is this machine's Python environment and the
repository; the container's command runs as a process (in the network
namespace of its fake node, through ``ip netns exec``). A Secret volume is
written to a directory of the pod's, and environment values under its mount
path point there instead (a process cannot mount).

``PodmanRuntime``: ``podman kube play`` of the pod exactly as the API server
stored it, with three adaptations podman 4.3 needs: server-set fields
(``status``, ``uid``, ...) are dropped; each Secret becomes a podman secret
whose ``data`` holds the plain text (podman reads ``data`` without decoding
base64 and ignores ``stringData``); and the pod joins its fake node's network
namespace by running podman there with ``--network host`` (``kube play``
rejects ``--network ns:PATH`` for pods). A pod with a service account gets the
fake's kubeconfig as one more podman secret, and KUBECONFIG naming it.
"""

from __future__ import annotations

import json
import os
import secrets as secrets_module
import signal
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class ProcessHandle:
    def __init__(self, process: subprocess.Popen):
        self._process = process

    def wait(self) -> int:
        code = self._process.wait()
        return code if code >= 0 else 128 - code  # As a container reports a signal.

    def pid(self) -> int:
        """The container's main process, on this machine (what a fault test signals)."""
        return self._process.pid

    def kill(self) -> None:
        """SIGKILL at once, as the kubelet ends a container under node pressure."""
        try:
            os.killpg(self._process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def terminate(self, grace: float) -> None:
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10)):
            try:
                os.killpg(self._process.pid, sig)
                self._process.wait(wait)
                return
            except ProcessLookupError:
                return
            except subprocess.TimeoutExpired:
                continue


class ProcessRuntime:
    """Runs each container as a local process; ``nice`` lowers their priority (a benchmark's
    hundreds of pods would otherwise starve the launcher they share this machine with, where
    real pods run on other machines)."""

    #: Set by ``FakeCluster``: a pod with a service account gets it as KUBECONFIG (the fake's
    #: stand-in for the token a real pod has mounted).
    kubeconfig: str | None = None

    def __init__(self, nice: int = 0):
        self.nice = nice

    def start(self, pod: dict, netns: str | None, secrets: dict[str, dict[str, bytes]],
              directory: str, log_path: str) -> ProcessHandle:
        """``secrets``: per mount path, the files of the Secret mounted there."""
        mounts = {}
        for number, (mount_path, files) in enumerate(secrets.items()):
            local = os.path.join(directory, f'volume{number}')
            os.makedirs(local)
            for key, value in files.items():
                with open(os.open(os.path.join(local, key), os.O_WRONLY | os.O_CREAT, 0o400),
                          'wb') as out:
                    out.write(value)
            mounts[mount_path] = local
        container = pod['spec']['containers'][0]
        env = {'PATH': f'{os.path.dirname(sys.executable)}:/usr/bin:/bin',
               'PYTHONPATH': f'{REPO}:{REPO}/tests', 'HOME': directory}
        if pod['spec'].get('serviceAccountName') and self.kubeconfig:
            env['KUBECONFIG'] = self.kubeconfig
        for item in container.get('env') or ():
            value = item['value']
            for mount_path, local in mounts.items():
                if value.startswith(mount_path):
                    value = local + value[len(mount_path):]
            env[item['name']] = value
        argv = (['ip', 'netns', 'exec', netns] if netns else []) + list(container['command'])
        if self.nice:
            argv = ['nice', '-n', str(self.nice), *argv]
        with open(log_path, 'wb') as log:
            process = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=subprocess.STDOUT, start_new_session=True,
                                       cwd=container.get('workingDir') or REPO)
        return ProcessHandle(process)


def podman(*args: str, netns: str | None = None, check: bool = True,
           timeout: float = 120) -> subprocess.CompletedProcess:
    """Runs podman (in network namespace ``netns``: nsenter keeps /sys, unlike ip netns exec)."""
    prefix = ['nsenter', f'--net=/run/netns/{netns}'] if netns else []
    return subprocess.run(prefix + ['podman', *args], capture_output=True, text=True,
                          timeout=timeout, check=check)


class PodmanHandle:
    def __init__(self, pod: str, container: str, secrets: list[str], log_path: str):
        self.pod, self._secrets = pod, secrets
        self._container = f'{pod}-{container}'  # As kube play names it.
        # `podman logs -f` copies the container's output into the log the API serves.
        with open(log_path, 'wb') as log:
            self._logs = subprocess.Popen(['podman', 'logs', '-f', self._container], stdout=log,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def wait(self) -> int:
        done = podman('wait', self._container, check=False, timeout=24 * 3600)
        try:
            self._logs.wait(10)
        except subprocess.TimeoutExpired:
            self._logs.kill()
            self._logs.wait()
        code = done.stdout.strip()
        return int(code) if code.lstrip('-').isdigit() else 1

    def pid(self) -> int | None:
        """The container's main process as this machine sees it (None once it is gone)."""
        found = podman('inspect', '--format', '{{.State.Pid}}', self._container, check=False)
        pid = found.stdout.strip()
        return int(pid) if pid.isdigit() and int(pid) > 0 else None

    def kill(self) -> None:
        podman('pod', 'kill', self.pod, check=False)

    def terminate(self, grace: float) -> None:
        podman('pod', 'stop', '-t', str(int(grace)), self.pod, check=False)

    def remove(self) -> None:
        _remove(self.pod, self._secrets)
        del self._secrets[:]  # The runtime's record of them, shared: its sweep skips them.


#: A generous bound on one podman call at teardown (under load they take tens of seconds).
_SWEEP_S = 300


def _remove(pod: str | None, secrets: list[str]) -> None:
    """``podman pod rm -f`` of ``pod`` (its containers go with it) and its secrets, each
    already gone being fine."""
    calls = [('pod', 'rm', '-f', pod)] if pod else []
    for name in secrets:  # kube play keeps a volume per secret.
        calls += [('secret', 'rm', name), ('volume', 'rm', '-f', name)]
    for call in calls:
        try:
            podman(*call, check=False, timeout=_SWEEP_S)
        except subprocess.TimeoutExpired:
            pass  # The sweep at the cluster's close tries again; ``left`` reports it.


#: The label on every podman pod a ``PodmanRuntime`` plays: its value is the runtime's token.
RUNTIME_LABEL = 'launchpad-py-fake-kube/runtime'


class PodmanRuntime:
    """Plays pods under podman, each labelled with this runtime's token, so that ``sweep``
    removes every pod it started (and ``left`` lists them) whatever its handle knows: a
    ``podman`` call that hung or timed out under load left pods no handle held."""

    #: As ``ProcessRuntime.kubeconfig``: mounted into a pod with a service account.
    kubeconfig: str | None = None
    _KUBE_DIR = '/var/run/launchpad-py-fake-kube'

    def __init__(self):
        self.token = secrets_module.token_hex(6)
        self.swept: list[str] = []
        self._secrets: dict[str, list[str]] = {}  # Per pod, the podman secrets made for it.

    def start(self, pod: dict, netns: str | None, secrets: dict[str, dict[str, bytes]],
              directory: str, log_path: str) -> PodmanHandle:
        secrets = dict(secrets)
        names = self._secrets.setdefault(pod['metadata']['name'], [])
        if pod['spec'].get('serviceAccountName') and self.kubeconfig:
            pod = self._with_kubeconfig(pod, secrets)
        volumes = {v['name']: v for v in pod['spec'].get('volumes') or ()}
        for mount in pod['spec']['containers'][0].get('volumeMounts') or ():
            if 'secret' not in volumes[mount['name']]:
                continue  # A hostPath volume (a test's shared directory): podman mounts it.
            name = volumes[mount['name']]['secret']['secretName']
            plain = {'apiVersion': 'v1', 'kind': 'Secret', 'metadata': {'name': name},
                     'data': {k: v.decode() for k, v in secrets[mount['mountPath']].items()}}
            with tempfile.NamedTemporaryFile('w', suffix='.yaml', dir=directory,
                                             delete=False) as out:
                json.dump(plain, out)  # JSON is YAML.
            names.append(name)  # Before it exists: a create that times out may still make it.
            podman('secret', 'create', name, out.name)
            os.remove(out.name)  # Its only copy now is podman's.
        metadata = {k: v for k, v in pod['metadata'].items()
                    if k not in ('uid', 'resourceVersion', 'creationTimestamp')}
        metadata['labels'] = {**(metadata.get('labels') or {}), RUNTIME_LABEL: self.token}
        played = {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': metadata, 'spec': pod['spec']}
        path = os.path.join(directory, 'pod.yaml')
        with open(path, 'w') as out:
            json.dump(played, out)
        podman('kube', 'play', '--network', 'host', path, netns=netns)
        return PodmanHandle(pod['metadata']['name'], pod['spec']['containers'][0]['name'], names,
                            log_path)

    def discard(self, name: str) -> None:
        """Removes pod ``name`` and its secrets, after a start that failed part way."""
        _remove(name, self._secrets.pop(name, []))

    def left(self) -> list[str]:
        """The podman pods this runtime started that still exist (any state)."""
        found = podman('pod', 'ps', '--filter', f'label={RUNTIME_LABEL}={self.token}',
                       '--format', '{{.Name}}', check=False, timeout=_SWEEP_S)
        return found.stdout.split()

    def sweep(self) -> None:
        """Removes every pod this runtime started, with its containers and secrets."""
        self.swept = self.left()  # What no handle removed: a fault run records it.
        for name in self.swept:
            _remove(name, [])
        for pod, names in list(self._secrets.items()):
            _remove(None, names)
            self._secrets.pop(pod, None)

    def _with_kubeconfig(self, pod: dict, secrets: dict[str, dict[str, bytes]]) -> dict:
        """The pod with the fake's kubeconfig mounted as one more Secret, and KUBECONFIG
        naming it (the fake's stand-in for a service account's token)."""
        pod = json.loads(json.dumps(pod))
        spec, container = pod['spec'], pod['spec']['containers'][0]
        name = f'{pod["metadata"]["name"]}-fake-kubeconfig'
        spec.setdefault('volumes', []).append({'name': 'fake-kubeconfig', 'secret': {
            'secretName': name, 'optional': False}})
        container.setdefault('volumeMounts', []).append({
            'name': 'fake-kubeconfig', 'mountPath': self._KUBE_DIR, 'readOnly': True})
        container.setdefault('env', []).append({'name': 'KUBECONFIG',
                                                'value': f'{self._KUBE_DIR}/config'})
        with open(self.kubeconfig, 'rb') as source:
            secrets[self._KUBE_DIR] = {'config': source.read()}
        return pod
