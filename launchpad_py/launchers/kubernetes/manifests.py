"""The Kubernetes objects of one launch, as plain dicts (what ``kubectl apply`` would take).

Per launch: one root Job, the program's *lease*, and per node a Pod and a
Secret holding its bootstrap; a group packed N per pod (``nodes_per_pod``) has
one Pod and Secret per N nodes instead, whose container runs the pod agent
(``node_side/pod_agent.py``). Every object carries the label
``launchpad-py/program=<name>-<id>`` and, once the root exists, an owner
reference to it, so deleting the root deletes everything.

The root Job runs nothing (``parallelism: 0``); it exists to be the owner and
to end the program when its launcher is gone: its ``activeDeadlineSeconds``
is the lease, which the launcher keeps extending. When the launcher dies the
deadline passes, the Job fails, ``ttlSecondsAfterFinished: 0`` deletes it and
the garbage collector deletes the Pods and Secrets it owns. Under a submitted
controller (``OWNER_ENV``), the root Job is itself owned by the controller's Job.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets

from launchpad_py.launchers.kubernetes.resources import KubernetesOptions, KubernetesResources

#: On every object of a launch; its value names the launch (``<name>-<id>``).
PROGRAM_LABEL = 'launchpad-py/program'
#: On each pod: which node it runs (``<label>-<index>``).
NODE_LABEL = 'launchpad-py/node'
BOOT_DIR = '/var/run/launchpad-py'
BOOT_FILE = 'bootstrap.json'
BOOT_ENV = 'LAUNCHPAD_PY_BOOTSTRAP'
_NODE_MODULE = 'launchpad_py.node_side.remote_node_main'
_AGENT_MODULE = 'launchpad_py.node_side.pod_agent'
#: Names the pod agent's bootstrap file (not ``BOOT_ENV``: the nodes it forks read stdin).
AGENT_BOOT_ENV = 'LAUNCHPAD_PY_POD_AGENT_BOOTSTRAP'
#: On a packed pod: the nodes it runs (``label/0,label/1,...``).
NODES_ANNOTATION = 'launchpad-py/node-names'
#: Set in a submitted program's controller pod (``submission/platforms/kubernetes``): the owner
#: reference (JSON) of the controller's Job, which then owns each launch's root Job.
OWNER_ENV = 'LAUNCHPAD_PY_K8S_OWNER'


def _dns_label(text: str, limit: int) -> str:
    """``text`` as a DNS label part: lower case letters, digits and '-', at most ``limit`` long."""
    cleaned = re.sub(r'[^a-z0-9]+', '-', text.lower()).strip('-')[:limit].strip('-')
    return cleaned or 'x'


class Names:
    """The names of one launch's objects, all valid DNS labels of at most 63 characters."""

    def __init__(self, program_name: str, nodes: list[tuple[str, int]], launch_id: str | None = None):
        self.launch_id = launch_id or secrets.token_hex(3)
        #: The program label's value and the root Job's name.
        self.program = f'{_dns_label(program_name, 28)}-{self.launch_id}'
        short = {label: _dns_label(label, 20) for label, _ in nodes}
        clashing = {s for s in short.values() if list(short.values()).count(s) > 1}
        for label, value in short.items():  # Labels that clean up alike get a hash each.
            if value in clashing:
                short[label] = f'{value[:14]}-{hashlib.sha1(label.encode()).hexdigest()[:5]}'
        self._short = short

    def pod(self, label: str, index: int, incarnation: int = 0) -> str:
        """The pod of node ``label/index``; a restart (``incarnation`` 1, 2, ...) gets ``-r1``..."""
        again = f'-r{incarnation}' if incarnation else ''
        return f'{self.program}-{self._short[label]}-{index}{again}'

    def node_value(self, label: str, index: int) -> str:
        return f'{self._short[label]}-{index}'

    def secret(self, label: str, index: int, incarnation: int = 0) -> str:
        return self.secret_of(self.pod(label, index, incarnation))

    @staticmethod
    def secret_of(pod_name: str) -> str:
        """The Secret holding the bootstrap of pod ``pod_name`` (a node's or a packed one's)."""
        return f'{pod_name}-boot'

    def packed_pod(self, label: str, number: int, incarnation: int = 0) -> str:
        """Pod ``number`` of a group packed N per pod (``-p0``, ``-p1``...; ``-r1`` again)."""
        again = f'-r{incarnation}' if incarnation else ''
        return f'{self.program}-{self._short[label]}-p{number}{again}'

    def packed_value(self, label: str, number: int) -> str:
        return f'{self._short[label]}-p{number}'


def _metadata(name: str, namespace: str, names: Names, owner: dict | None, **labels) -> dict:
    metadata = {'name': name, 'namespace': namespace,
                'labels': {PROGRAM_LABEL: names.program, **labels}}
    if owner is not None:
        metadata['ownerReferences'] = [owner]
    return metadata


def owner_reference(root: dict) -> dict:
    """Makes an object a dependent of the created root Job (``root`` as the API returned it)."""
    return {'apiVersion': 'batch/v1', 'kind': 'Job', 'name': root['metadata']['name'],
            'uid': root['metadata']['uid']}


def submitted_owner() -> dict | None:
    """The owner reference a submitted program's controller pod puts in ``OWNER_ENV``: its
    own Job, so that deleting that Job deletes every lease, and with it every node."""
    text = os.environ.get(OWNER_ENV)
    return json.loads(text) if text else None


def root_job(names: Names, options: KubernetesOptions, image: str) -> dict:
    """The lease: a Job that runs no pod and fails when ``activeDeadlineSeconds`` passes."""
    return {
        'apiVersion': 'batch/v1', 'kind': 'Job',
        'metadata': _metadata(names.program, options.namespace, names, submitted_owner()),
        'spec': {
            'parallelism': 0, 'completions': 1, 'backoffLimit': 0,
            'activeDeadlineSeconds': options.lease_seconds, 'ttlSecondsAfterFinished': 0,
            'template': {
                'metadata': {'labels': {PROGRAM_LABEL: names.program}},
                'spec': {'restartPolicy': 'Never', 'automountServiceAccountToken': False,
                         'containers': [{'name': 'lease', 'image': image, 'command': ['true']}]},
            },
        },
    }


def boot_secret(names: Names, options: KubernetesOptions, label: str, index: int,
                owner: dict | None, boot: dict | None, incarnation: int = 0) -> dict:
    """One node's bootstrap (control address and key, program secret); None: a placeholder."""
    text = json.dumps(boot) if boot is not None else '(made when the program is launched)'
    return {'apiVersion': 'v1', 'kind': 'Secret', 'type': 'Opaque',
            'metadata': _metadata(names.secret(label, index, incarnation), options.namespace,
                                  names, owner,
                                  **{NODE_LABEL: names.node_value(label, index)}),
            'stringData': {BOOT_FILE: text}}


def _container(spec: KubernetesResources, hide_gpus: bool, module: str = _NODE_MODULE,
               boot_env: str = BOOT_ENV) -> dict:
    env = {boot_env: f'{BOOT_DIR}/{BOOT_FILE}', 'PYTHONUNBUFFERED': '1', **(spec.env or {})}
    if hide_gpus and not spec.gpus:  # As under local_mp and ssh: GPUs go only where named.
        env.setdefault('CUDA_VISIBLE_DEVICES', '')
    container = {'name': 'node', 'image': spec.image,
                 'command': [spec.python, '-m', module],
                 'env': [{'name': k, 'value': v} for k, v in env.items()],
                 'volumeMounts': [{'name': 'bootstrap', 'mountPath': BOOT_DIR, 'readOnly': True}]}
    if spec.workdir:
        container['workingDir'] = spec.workdir
    resources = spec.container_resources()
    if resources:
        container['resources'] = resources
    return container


def pod(names: Names, options: KubernetesOptions, label: str, index: int,
        spec: KubernetesResources, owner: dict | None, grace: float, hide_gpus: bool,
        incarnation: int = 0) -> dict:
    """The pod of node ``label/index``: ``python -m ...remote_node_main`` with its Secret mounted."""
    metadata = _metadata(names.pod(label, index, incarnation), options.namespace, names, owner,
                         **{NODE_LABEL: names.node_value(label, index)})
    metadata['annotations'] = {'launchpad-py/node-name': f'{label}/{index}'}
    return _pod(metadata, names.secret(label, index, incarnation), options, spec, grace,
                _container(spec, hide_gpus))


def packed_secret(names: Names, options: KubernetesOptions, label: str, number: int,
                  owner: dict | None, boot: dict | None, incarnation: int = 0) -> dict:
    """The pod agent's bootstrap (where to dial, its key, the program secret) of packed pod
    ``number``; None: a placeholder."""
    name = names.packed_pod(label, number, incarnation)
    text = json.dumps(boot) if boot is not None else '(made when the program is launched)'
    return {'apiVersion': 'v1', 'kind': 'Secret', 'type': 'Opaque',
            'metadata': _metadata(names.secret_of(name), options.namespace, names, owner,
                                  **{NODE_LABEL: names.packed_value(label, number)}),
            'stringData': {BOOT_FILE: text}}


def packed_pod(names: Names, options: KubernetesOptions, label: str, number: int,
               indices: list[int], spec: KubernetesResources, owner: dict | None, grace: float,
               hide_gpus: bool, incarnation: int = 0) -> dict:
    """Packed pod ``number`` of group ``label`` for its nodes ``indices``: the pod agent,
    which starts each of them as a process when the launcher asks."""
    name = names.packed_pod(label, number, incarnation)
    metadata = _metadata(name, options.namespace, names, owner,
                         **{NODE_LABEL: names.packed_value(label, number)})
    metadata['annotations'] = {NODES_ANNOTATION: ','.join(f'{label}/{i}' for i in indices)}
    return _pod(metadata, names.secret_of(name), options, spec, grace,
                _container(spec, hide_gpus, _AGENT_MODULE, AGENT_BOOT_ENV))


def _pod(metadata: dict, secret: str, options: KubernetesOptions, spec: KubernetesResources,
         grace: float, container: dict) -> dict:
    pod_spec = {
        'restartPolicy': 'Never',
        'terminationGracePeriodSeconds': int(grace) + 5,
        'enableServiceLinks': False,
        'automountServiceAccountToken': options.service_account is not None,
        'containers': [container],
        # optional: false is the default; written out because podman 4.3 needs it set.
        'volumes': [{'name': 'bootstrap', 'secret': {'secretName': secret,
                                                     'defaultMode': 0o400, 'optional': False}}],
    }
    if options.service_account:
        pod_spec['serviceAccountName'] = options.service_account
    if spec.node_selector:
        pod_spec['nodeSelector'] = dict(spec.node_selector)
    if spec.tolerations:
        pod_spec['tolerations'] = [dict(t) for t in spec.tolerations]
    return {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': metadata, 'spec': pod_spec}
