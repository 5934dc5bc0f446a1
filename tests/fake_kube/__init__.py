"""A fake Kubernetes cluster for the launcher's tests: a real HTTP API server, fake controllers.

    with FakeCluster(str(tmp_path), [FakeNode('h1', netns='lp-h1')]) as cluster:
        monkeypatch.setenv('KUBECONFIG', cluster.kubeconfig)
        lp.launch(program, launch_type='kubernetes', ...)
        cluster.objects()     # every Job, Secret and Pod left, as (kind, name)

See ``server.py`` for the calls it implements and ``kubelet.py`` for how pods run.
"""

from __future__ import annotations

import json
import os
import threading

from fake_kube.kubelet import FakeNode, Kubelet
from fake_kube.runtimes import ProcessRuntime
from fake_kube.server import ApiServer
from fake_kube.store import KINDS, Store

__all__ = ['FakeCluster', 'FakeNode']
#: The image name the fake kubelet "has": this environment and the repository.
IMAGE = 'localhost/launchpad-py-test:latest'


class FakeCluster:
    """Store, controllers and API server of one fake cluster; a context manager."""

    def __init__(self, workdir: str, nodes: list[FakeNode], namespaces=('default', 'research'),
                 images=(IMAGE,), runtime=None, api_host: str = '127.0.0.1'):
        """``api_host``: the address the API server listens on; pods in the namespace hosts
        reach 10.250.0.1 (the bridge), not this machine's loopback."""
        self.store = Store(namespaces)
        self.kubelet = Kubelet(self.store, nodes, set(images), workdir,
                               runtime or ProcessRuntime())
        self.server = ApiServer(self.store, self.kubelet, api_host)
        self._thread = threading.Thread(target=self.server.serve_forever, name='fake-kube-api',
                                        daemon=True)
        self._thread.start()
        self.url = f'http://{api_host}:{self.server.server_address[1]}'
        self.kubeconfig = os.path.join(workdir, 'kubeconfig')
        # A pod with a service account reaches this API server (as a mounted token would).
        self.kubelet.runtime.kubeconfig = self.kubeconfig
        with open(self.kubeconfig, 'w') as out:
            json.dump({'apiVersion': 'v1', 'kind': 'Config', 'current-context': 'fake',
                       'clusters': [{'name': 'fake', 'cluster': {'server': self.url}}],
                       'users': [{'name': 'fake', 'user': {'token': 'fake-token'}}],
                       'contexts': [{'name': 'fake', 'context': {'cluster': 'fake',
                                                                 'user': 'fake'}}]}, out)

    def objects(self, namespace: str | None = None) -> list[tuple[str, str]]:
        """(kind, name) of every object in the cluster (Jobs, Secrets, Pods, RBAC objects)."""
        found = []
        for resource in KINDS:
            items, _ = self.store.list(resource, namespace)
            found += [(item['kind'], item['metadata']['name']) for item in items]
        return sorted(found)

    def close(self) -> None:
        self.server.closing.set()
        self.kubelet.close()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(10)

    def __enter__(self) -> 'FakeCluster':
        return self

    def __exit__(self, *exc) -> None:
        self.close()
