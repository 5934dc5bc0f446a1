"""The fake cluster's kubelet (tests/fake_kube) where a pod ends while its container starts,
and where podman times out while starting one."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import wait_for
from fake_kube import IMAGE, FakeCluster, FakeNode
from fake_kube.runtimes import PodmanRuntime, ProcessRuntime

_BASE = 'localhost/lp-base:latest'  # Has sleep(1); the podman tests' base image.


class _DeletedWhileStarting(ProcessRuntime):
    """Starts the container, then has its pod deleted before the kubelet hears back (a podman
    pod takes seconds to start; the program may end meanwhile)."""

    store = None

    def start(self, pod, netns, secrets, directory, log_path):
        handle = super().start(pod, netns, secrets, directory, log_path)
        if pod['metadata']['name'] == 'doomed':
            self.store.delete('pods', 'default', 'doomed')
        return handle


def _pod(name: str, image: str = IMAGE) -> dict:
    return {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': name},
            'spec': {'restartPolicy': 'Never', 'containers': [
                {'name': 'node', 'image': image, 'command': ['sleep', '600']}]}}


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


class _TimesOutAfterPlaying(PodmanRuntime):
    """``podman kube play`` of pod 'slow' made its pod, then timed out (as under load)."""

    def start(self, pod, netns, secrets, directory, log_path):
        handle = super().start(pod, netns, secrets, directory, log_path)
        if pod['metadata']['name'] == 'slow':
            raise subprocess.TimeoutExpired(['podman', 'kube', 'play'], 120)
        return handle


@pytest.mark.skipif(os.environ.get('LP_K8S_PODMAN') != '1',
                    reason='podman pods; set LP_K8S_PODMAN=1 (root, the lp-base image)')
def test_a_podman_pod_whose_start_timed_out_is_removed_and_the_kubelet_goes_on(tmp_path,
                                                                               monkeypatch):
    """The kubelet goes on to the next pod, and after the cluster's close no podman pod of
    its runtime is left: the timeout killed the kubelet's loop before and left the pod."""
    conf = tmp_path / 'containers.conf'
    conf.write_text('[engine]\nruntime = "runc"\n')  # As test_kubernetes_podman's fixture.
    monkeypatch.setenv('CONTAINERS_CONF', str(conf))
    runtime = _TimesOutAfterPlaying()
    try:
        with FakeCluster(str(tmp_path), [FakeNode('n1')], images=(_BASE,),
                         runtime=runtime) as cluster:
            cluster.store.create('pods', 'default', _pod('slow', _BASE))
            cluster.store.create('pods', 'default', _pod('next', _BASE))
            wait_for(lambda: cluster.kubelet.running() == ['next'], timeout=120,
                     what="the next pod's container running")
        assert runtime.left() == []
    finally:
        runtime.sweep()


_ECHO_UNTIL_EOF = '''
import socket, sys
server = socket.create_server(("127.0.0.1", int(sys.argv[1])))
open(sys.argv[2] + ".listening", "w").close()
connection, _ = server.accept()
while connection.recv(65536):
    pass
open(sys.argv[2], "w").write("ended")
'''


def test_a_port_forward_whose_client_goes_ends_its_connection_in_the_pod(tmp_path):
    """When the client of ``pods/portforward`` closes, the connection the fake opened to the
    pod's port ends at once, as a kubelet's does. Before, the fake closed that socket while its
    own reading thread was still in ``recv``, which sends no FIN: the pod's side saw the end
    only when that thread's receive timed out, or when the pod closed first (a dashboard relay:
    after the dashboard's idle timeout). Stop 42's CI once timed out waiting for the relays in
    a pod to end (``test_submit_kubernetes_dashboard``)."""
    import socket as sockets

    from kubernetes import client, config
    from kubernetes.stream import portforward
    with sockets.socket() as free:
        free.bind(('127.0.0.1', 0))
        port = free.getsockname()[1]
    ended = tmp_path / 'ended'
    pod = _pod('echo')
    pod['spec']['containers'][0]['command'] = [
        sys.executable, '-c', _ECHO_UNTIL_EOF, str(port), str(ended)]
    (tmp_path / 'kube').mkdir()
    with FakeCluster(str(tmp_path / 'kube'), [FakeNode('n1')]) as cluster:
        cluster.store.create('pods', 'default', pod)
        core = client.CoreV1Api(config.new_client_from_config(cluster.kubeconfig))
        wait_for(lambda: os.path.exists(f'{ended}.listening'), 60, "the pod's server to listen")
        forward = portforward(core.connect_get_namespaced_pod_portforward, 'echo', 'default',
                              ports=str(port))
        sock = forward.socket(port)
        sock.setblocking(True)
        sock.sendall(b'hello')
        sock.close()
        forward.close()
        # Before, it ended only when the fake's reading thread timed out (10 s, the timeout of
        # the kubelet's connection to the pod).
        wait_for(ended.exists, 5, "the pod's side of the forward to see the end")
