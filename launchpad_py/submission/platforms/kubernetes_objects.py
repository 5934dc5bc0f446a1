"""The Kubernetes objects of a submitted program's controller, as plain dicts (what is applied).

    objects = Objects(record, options)
    objects.all(files, owner)      # ServiceAccount, Role, RoleBinding, Secret, Job

One Job runs the controller (``controller_main --kubernetes``) in a pod, with
``backoffLimit`` the controller restarts asked for. The pod runs as its own
ServiceAccount, which a Role and RoleBinding give exactly what the Kubernetes
launcher calls (``launchers/kubernetes/api.py``) in the namespace, and nothing
else. The record, the program's secret and the script (or the pickled
program) go in a Secret mounted read-only into the pod: never on a command
line, never in a manifest's plain env. Every other object is owned by the Job
(``ownerReferences``), and so is the root Job of each program the controller
launches (``manifests.OWNER_ENV``): deleting the Job deletes everything.
"""

from __future__ import annotations

import base64
import dataclasses
import re
from typing import Any, Mapping

from launchpad_py import errors
from launchpad_py.launchers import options as launch_options
from launchpad_py.launchers.kubernetes.resources import KubernetesOptions, KubernetesResources

#: On every object of a submission; its value is the Job's name.
SUBMITTED_LABEL = 'launchpad-py/submitted'
MOUNT = '/var/run/launchpad-py-submission'
#: Where the controller finds the mounted Secret (an env value, which the fake kubelet maps).
MOUNT_ENV = 'LAUNCHPAD_PY_SUBMISSION'
SCRIPT = 'script.py'
#: What the API server accepts in one Secret.
SECRET_LIMIT = 1024 * 1024
_RBAC = 'rbac.authorization.k8s.io'
#: What the Kubernetes launcher calls, as RBAC rules (docs/launchers.md lists the same).
RULES = [
    {'apiGroups': ['batch'], 'resources': ['jobs'], 'verbs': ['create', 'patch', 'delete']},
    {'apiGroups': [''], 'resources': ['pods'], 'verbs': ['create', 'delete', 'list', 'watch']},
    {'apiGroups': [''], 'resources': ['pods/log'], 'verbs': ['get']},
    {'apiGroups': [''], 'resources': ['secrets'], 'verbs': ['create', 'delete']},
]


@dataclasses.dataclass(frozen=True)
class SubmitOptions:
    """``kubernetes_options=`` of ``lp.submit(..., launch_type='kubernetes')``.

    ``image``: holds launchpad_py, the script's imports and Python (required);
    ``namespace``/``context``: where (the kubeconfig's context); ``python``,
    ``workdir``, ``env``: the controller's container; ``ttl_seconds``: how long
    the finished Job (and so the program's result and logs) is kept.
    """

    image: str | None = None
    namespace: str = 'default'
    context: str | None = None
    python: str = 'python3'
    workdir: str | None = None
    env: Mapping[str, str] | None = None
    ttl_seconds: int = 7 * 24 * 3600

    def __post_init__(self) -> None:
        if self.image is None:
            raise errors.ProgramError("lp.submit(..., launch_type='kubernetes') needs "
                                      "kubernetes_options={'image': ...}: an image holding "
                                      'launchpad_py and what the script imports')
        # The same checks (and messages) as the launcher's own options and resources.
        self.container()
        KubernetesOptions(namespace=self.namespace, context=self.context)
        if (isinstance(self.ttl_seconds, bool) or not isinstance(self.ttl_seconds, int)
                or self.ttl_seconds < 0):
            raise ValueError(f"kubernetes_options 'ttl_seconds' must be whole seconds, 0 or more "
                             f'(got {self.ttl_seconds!r})')

    def container(self) -> KubernetesResources:
        return KubernetesResources(image=self.image, python=self.python, workdir=self.workdir,
                                   env=self.env)

    @classmethod
    def from_mapping(cls, given: Mapping[str, Any] | None) -> 'SubmitOptions':
        return cls(**launch_options.only_known_keys('kubernetes_options', dict(given or {}), cls))


def job_name(program_id: str) -> str:
    """The Job's name: the id as a DNS label short enough for its pods' names (+6)."""
    return re.sub(r'[^a-z0-9-]+', '-', program_id.lower()).strip('-')[:56].strip('-')


class Objects:
    """Renders the objects of one submission."""

    def __init__(self, record: dict, options: SubmitOptions):
        self.name, self.namespace = record['job'], options.namespace
        self._record, self._options = record, options

    def _metadata(self, owner: dict | None) -> dict:
        metadata = {'name': self.name, 'namespace': self.namespace,
                    'labels': {SUBMITTED_LABEL: self.name}}
        if owner is not None:
            metadata['ownerReferences'] = [owner]
        return metadata

    def job(self) -> dict:
        """Created suspended: its pod starts once what it mounts and runs as exists."""
        spec = self._options.container()
        env = {MOUNT_ENV: MOUNT, 'PYTHONUNBUFFERED': '1', **(spec.env or {})}
        container = {'name': 'controller', 'image': spec.image,
                     'command': [spec.python, '-u', '-m', 'launchpad_py.submission.controller_main',
                                 '--kubernetes'],
                     'env': [{'name': k, 'value': v} for k, v in env.items()],
                     'volumeMounts': [{'name': 'submission', 'mountPath': MOUNT,
                                       'readOnly': True}]}
        if spec.workdir:
            container['workingDir'] = spec.workdir
        return {'apiVersion': 'batch/v1', 'kind': 'Job', 'metadata': self._metadata(None), 'spec': {
            'backoffLimit': self._record.get('controller_restarts') or 0, 'suspend': True,
            'ttlSecondsAfterFinished': self._options.ttl_seconds,
            'template': {'metadata': {'labels': {SUBMITTED_LABEL: self.name}}, 'spec': {
                'restartPolicy': 'Never', 'serviceAccountName': self.name,
                'automountServiceAccountToken': True, 'enableServiceLinks': False,
                # SIGTERM (the Job deleted) is the controller's clean stop: time for it.
                'terminationGracePeriodSeconds': 90,
                'containers': [container],
                'volumes': [{'name': 'submission', 'secret': {
                    'secretName': self.name, 'defaultMode': 0o400, 'optional': False}}]}}}}

    def rights(self, owner: dict | None) -> list[dict]:
        """The controller's ServiceAccount, its Role and their RoleBinding."""
        return [
            {'apiVersion': 'v1', 'kind': 'ServiceAccount', 'metadata': self._metadata(owner),
             'automountServiceAccountToken': True},
            {'apiVersion': f'{_RBAC}/v1', 'kind': 'Role', 'metadata': self._metadata(owner),
             'rules': RULES},
            {'apiVersion': f'{_RBAC}/v1', 'kind': 'RoleBinding', 'metadata': self._metadata(owner),
             'roleRef': {'apiGroup': _RBAC, 'kind': 'Role', 'name': self.name},
             'subjects': [{'kind': 'ServiceAccount', 'name': self.name,
                           'namespace': self.namespace}]},
        ]

    def secret(self, files: dict[str, bytes], owner: dict | None) -> dict:
        """The Secret mounted into the controller pod; too big for one Secret is an error."""
        data = {name: base64.b64encode(content).decode() for name, content in files.items()}
        size = sum(len(content) for content in files.values())
        if size > SECRET_LIMIT:
            raise errors.ProgramError(
                f'program {self._record["name"]!r} is too big to submit to Kubernetes: its '
                f'record, secret and {"script" if SCRIPT in files else "pickled program"} are '
                f'{size} bytes, and one Secret holds at most {SECRET_LIMIT} (1 MiB). Put large '
                'data in the image or on a volume, and submit a script that loads it')
        return {'apiVersion': 'v1', 'kind': 'Secret', 'type': 'Opaque',
                'metadata': self._metadata(owner), 'data': data}

    def all(self, files: dict[str, bytes], owner: dict | None) -> list[dict]:
        return [*self.rights(owner), self.secret(files, owner), self.job()]


def owner_of(job: dict) -> dict:
    """An owner reference to the created Job (as the API returned it)."""
    return {'apiVersion': 'batch/v1', 'kind': 'Job', 'name': job['metadata']['name'],
            'uid': job['metadata']['uid']}
