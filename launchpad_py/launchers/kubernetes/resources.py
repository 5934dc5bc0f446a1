"""``lp.KubernetesResources`` and the Kubernetes launcher's options, checked before anything starts.

    lp.launch(p, launch_type='kubernetes', resources={
        'learner': lp.KubernetesResources(image='registry/team/agent:1.2', cpu='8',
                                          memory='32Gi', gpus=1, node_selector={'pool': 'a100'}),
        'actor': lp.KubernetesResources(image='registry/team/agent:1.2', cpu='1', memory='2Gi'),
    }, kubernetes_options={'namespace': 'research'})
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping

from launchpad_py import errors
from launchpad_py.launchers import options

# A Kubernetes quantity: a number, then a binary (Ki..Ei) or decimal (m, k..E) suffix or exponent.
_QUANTITY = re.compile(r'^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|[eE][0-9]+)?$')
_LABEL_VALUE = re.compile(r'^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$')
_DNS_LABEL = re.compile(r'^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$')
_GPU = 'nvidia.com/gpu'


def _quantity(value, what: str, owner: str) -> str | None:
    """``value`` as Kubernetes writes a quantity ('500m', '2Gi'), or a clear error."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        value = f'{value:g}'
    if not isinstance(value, str) or not _QUANTITY.match(value):
        raise ValueError(f"{owner} {what} must be a Kubernetes quantity such as '500m', '2', "
                         f"'512Mi' or '4Gi' (got {value!r})")
    return value


def _check_optional_strings(obj, names: tuple[str, ...], owner: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if value is not None and (not isinstance(value, str) or not value):
            raise TypeError(f'{owner} {name} must be a non-empty string (got {value!r})')


@dataclasses.dataclass(frozen=True)
class KubernetesResources:
    """How the pods of one group run.

    ``image``: holds your code and launchpad_py (see docs/launchers.md);
    ``cpu``/``memory``: requests, e.g. ``'8'``, ``'500m'``, ``'32Gi'``;
    ``cpu_limit``/``memory_limit``: limits (memory defaults to the request,
    cpu to none); ``gpus``: ``nvidia.com/gpu`` limit; ``node_selector`` and
    ``tolerations``: where pods may run; ``env``: extra variables;
    ``python``: the interpreter in the image; ``workdir``: its working directory;
    ``nodes_per_pod``: how many of the group's nodes share one pod (1: a pod each;
    N > 1: one pod runs a small agent that starts its N nodes as processes, which
    saves the cluster a pod, and the launcher a create and a watch entry, per node;
    ``cpu``, ``memory`` and ``gpus`` are then the pod's, shared by its nodes).
    """

    image: str
    cpu: str | int | float | None = None
    memory: str | None = None
    cpu_limit: str | int | float | None = None
    memory_limit: str | None = None
    gpus: int = 0
    node_selector: Mapping[str, str] | None = None
    tolerations: tuple[Mapping[str, Any], ...] | list[Mapping[str, Any]] = ()
    env: Mapping[str, str] | None = None
    python: str = 'python3'
    workdir: str | None = None
    nodes_per_pod: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.image, str) or not self.image.strip() or ' ' in self.image:
            raise TypeError(f"KubernetesResources image must name an image such as "
                            f"'registry/team/agent:1.2' (got {self.image!r})")
        owner = f'KubernetesResources(image={self.image!r})'
        for name in ('cpu', 'memory', 'cpu_limit', 'memory_limit'):
            object.__setattr__(self, name, _quantity(getattr(self, name), name, owner))
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or self.gpus < 0:
            raise ValueError(f'{owner} gpus must be a whole number of GPUs, 0 or more '
                             f'(got {self.gpus!r})')
        selector = self.node_selector or {}
        if not isinstance(selector, Mapping) or not all(
                isinstance(k, str) and k and isinstance(v, str) and _LABEL_VALUE.match(v)
                for k, v in selector.items()):
            raise TypeError(f"{owner} node_selector must map label names to label values, such "
                            f"as {{'pool': 'a100'}} (got {self.node_selector!r})")
        if isinstance(self.tolerations, (str, Mapping)) or not all(
                isinstance(t, Mapping) for t in self.tolerations):
            raise TypeError(f"{owner} tolerations must be a list of toleration dicts such as "
                            f"[{{'key': 'gpu', 'operator': 'Exists', 'effect': 'NoSchedule'}}] "
                            f"(got {self.tolerations!r})")
        env = self.env or {}
        if not isinstance(env, Mapping) or not all(
                isinstance(k, str) and k.isidentifier() and isinstance(v, str)
                for k, v in env.items()):
            raise TypeError(f'{owner} env must map variable names to strings (got {self.env!r})')
        _check_optional_strings(self, ('python', 'workdir'), owner)

    def container_resources(self) -> dict:
        """The container's ``resources``: requests, limits, and GPUs as ``nvidia.com/gpu``."""
        requests = {k: v for k, v in (('cpu', self.cpu), ('memory', self.memory)) if v}
        limits = {k: v for k, v in (('cpu', self.cpu_limit),
                                    ('memory', self.memory_limit or self.memory)) if v}
        if self.gpus:
            limits[_GPU] = str(self.gpus)
        return {k: v for k, v in (('requests', requests), ('limits', limits)) if v}


@dataclasses.dataclass(frozen=True)
class KubernetesOptions:
    """``kubernetes_options=`` of ``lp.launch`` (every field optional).

    ``namespace``: where every object goes; ``service_account``: the pods'
    (none by default: nodes need no API access, so no token is mounted);
    ``launcher_address``: the address pods dial back to (default: this
    machine's address on the route to the API server); ``lease_seconds``: how
    long the program's objects outlive a launcher that died; ``manifests_dir``:
    dry run, write the manifests there and apply nothing; ``context``: the
    kubeconfig context to use; ``create_concurrency``: how many creates the
    launcher has in flight at once (16; a big launch neither waits on each in
    turn nor floods the API server).
    """

    namespace: str = 'default'
    service_account: str | None = None
    launcher_address: str | None = None
    lease_seconds: int = 60
    manifests_dir: str | None = None
    context: str | None = None
    create_concurrency: int = 16

    def __post_init__(self) -> None:
        for name in ('namespace', 'service_account'):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not _DNS_LABEL.match(value)):
                raise ValueError(f"kubernetes_options {name!r} must be a Kubernetes name such as "
                                 f"'research' (lower case letters, digits, '-') (got {value!r})")
        if (isinstance(self.lease_seconds, bool) or not isinstance(self.lease_seconds, int)
                or self.lease_seconds < 2):
            raise ValueError(f"kubernetes_options 'lease_seconds' must be a whole number of "
                             f"seconds, 2 or more (got {self.lease_seconds!r})")
        if (isinstance(self.create_concurrency, bool) or not isinstance(self.create_concurrency, int)
                or not 1 <= self.create_concurrency <= 256):
            raise ValueError(f"kubernetes_options 'create_concurrency' must be a whole number "
                             f"from 1 to 256 (got {self.create_concurrency!r})")
        _check_optional_strings(self, ('launcher_address', 'manifests_dir', 'context'),
                                'kubernetes_options')

    @classmethod
    def from_mapping(cls, given: Mapping[str, Any]) -> 'KubernetesOptions':
        return cls(**options.only_known_keys('kubernetes_options', given, cls))


def resources_of_groups(groups: list[str], given: Mapping[str, Any],
                        default_image: str | None = None) -> dict[str, KubernetesResources]:
    """Each group's ``KubernetesResources``; a group without one runs ``default_image`` as it is."""
    resources = {}
    for group in groups:
        spec = given.get(group)
        if spec is None and default_image:
            spec = KubernetesResources(image=default_image)
        if spec is None:
            raise errors.ResourcesError(
                f"group {group!r} has no image: pass resources={{{group!r}: "
                f"lp.KubernetesResources(image='registry/team/agent:1.2')}} to lp.launch, or "
                f"name an image for every group with --lp_k8s_image")
        if not isinstance(spec, KubernetesResources):
            raise errors.ResourcesError(f'resources[{group!r}] must be lp.KubernetesResources(...) '
                                        f'for kubernetes (got {spec!r})')
        packing = spec.nodes_per_pod
        if isinstance(packing, bool) or not isinstance(packing, int) or packing < 1:
            # Checked here, not when it is made: here the message can name the group.
            raise errors.ResourcesError(
                f'group {group!r}: KubernetesResources nodes_per_pod must be a whole number of '
                f'nodes, 1 or more (got {packing!r}); 1 runs each node in a pod of its own')
        resources[group] = spec
    return resources
