"""The fake cluster's kubelet (tests/fake_kube) where a pod ends while its container starts."""

from __future__ import annotations

from conftest import wait_for
from fake_kube import IMAGE, FakeCluster, FakeNode
from fake_kube.runtimes import ProcessRuntime


class _DeletedWhileStarting(ProcessRuntime):
    """Starts the container, then has its pod deleted before the kubelet hears back (a podman
    pod takes seconds to start; the program may end meanwhile)."""

    store = None

    def start(self, pod, netns, secrets, directory, log_path):
        handle = super().start(pod, netns, secrets, directory, log_path)
        if pod['metadata']['name'] == 'doomed':
            self.store.delete('pods', 'default', 'doomed')
        return handle


def _pod(name: str) -> dict:
    return {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': name},
            'spec': {'restartPolicy': 'Never', 'containers': [
                {'name': 'node', 'image': IMAGE, 'command': ['sleep', '600']}]}}


def test_a_pod_deleted_while_its_container_starts_is_ended_and_the_kubelet_goes_on(tmp_path):
    """Its container is ended (none left running), and the next pod still starts: the
    kubelet's loop died on the missing pod before, leaving the container behind."""
    runtime = _DeletedWhileStarting()
    with FakeCluster(str(tmp_path), [FakeNode('n1')], runtime=runtime) as cluster:
        runtime.store = cluster.store
        cluster.store.create('pods', 'default', _pod('doomed'))
        cluster.store.create('pods', 'default', _pod('next'))
        wait_for(lambda: cluster.kubelet.running() == ['next'], timeout=30,
                 what="only the next pod's container running")
