"""The Kubernetes launcher on a real cluster: runs only where ``KUBECONFIG`` is set.

Needs an image with this repository's code and its dependencies in
``LP_K8S_IMAGE`` (code under a directory on its PYTHONPATH, tests/ included),
and a cluster whose pods can reach this machine (``LP_K8S_LAUNCHER_ADDRESS``
names the address they reach it at, if not the one on the route to the API
server). ``LP_K8S_NAMESPACE`` picks the namespace (default: default).
"""

from __future__ import annotations

import os

import pytest

import launchpad_py as lp
from conftest import needs_kubernetes_client, wait_for
from nodes_for_tests import Pinger

pytestmark = [
    needs_kubernetes_client,
    pytest.mark.skipif(not os.environ.get('KUBECONFIG'),
                       reason='no real cluster: KUBECONFIG is not set'),
    pytest.mark.skipif(not os.environ.get('LP_K8S_IMAGE'),
                       reason='LP_K8S_IMAGE must name an image holding this repository'),
]


def _options() -> dict:
    options = {'namespace': os.environ.get('LP_K8S_NAMESPACE', 'default')}
    if os.environ.get('LP_K8S_LAUNCHER_ADDRESS'):
        options['launcher_address'] = os.environ['LP_K8S_LAUNCHER_ADDRESS']
    return options


def _objects(namespace: str, program_label: str) -> list[str]:
    from kubernetes import client, config
    config.load_kube_config(config_file=os.environ['KUBECONFIG'])
    selector = f'launchpad-py/program={program_label}'
    core, batch = client.CoreV1Api(), client.BatchV1Api()
    found = [p.metadata.name for p in core.list_namespaced_pod(
        namespace, label_selector=selector).items]
    found += [s.metadata.name for s in core.list_namespaced_secret(
        namespace, label_selector=selector).items]
    found += [j.metadata.name for j in batch.list_namespaced_job(
        namespace, label_selector=selector).items]
    return found


def test_pods_on_a_real_cluster_serve_and_leave_nothing():
    """A courier node in a pod answers; after stop the cluster deletes every object (GC)."""
    program = lp.Program('realcluster')
    pinger = program.add_node(lp.CourierNode(Pinger), label='pinger')
    resources = {'pinger': lp.KubernetesResources(image=os.environ['LP_K8S_IMAGE'], cpu='100m',
                                                  memory='256Mi')}
    options = _options()
    with lp.launch(program, launch_type='kubernetes', resources=resources,
                   kubernetes_options=options) as controller:
        assert pinger.dereference().ping('real') == ('pong', 'real')
        label = controller.statuses()[0].host.rsplit('-', 2)[0]
    wait_for(lambda: not _objects(options['namespace'], label), timeout=120,
             what="the garbage collector to delete the program's objects")
