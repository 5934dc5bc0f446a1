"""``lp.RayResources`` (what each node of a group asks of Ray) and the launch-wide ``ray_options``.

    lp.launch(p, launch_type='ray', resources={
        'learner': lp.RayResources(num_gpus=1, memory=8 * 2**30),
        'actor': lp.RayResources(num_cpus=1, scheduling='SPREAD'),
    }, ray_options={'address': 'auto', 'gang': True})

Both are plain values checked before anything reaches Ray; nothing here imports ray,
so a program can name them where ray is not installed.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping

from launchpad_py import errors
from launchpad_py.launchers import options

#: How a group's nodes spread over the cluster: Ray's strategies, or a dict of node labels.
SCHEDULING = ('DEFAULT', 'SPREAD', 'PACK')


def _number(owner: str, name: str, value: Any, whole: bool = False) -> None:
    kinds = (int,) if whole else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value < 0:
        kind = 'an int' if whole else 'a number'
        raise errors.ResourcesError(f'{owner} {name} must be {kind} >= 0 (got {value!r})')


def _str_mapping(owner: str, name: str, value: Any, example: str) -> None:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise errors.ResourcesError(f'{owner} {name} must be a dict such as {example} '
                                    f'(got {value!r})')


@dataclasses.dataclass(frozen=True)
class RayResources:
    """What each node of one group asks Ray for; its node runs in an actor given exactly this.

    ``num_cpus``, ``num_gpus``, ``memory`` (bytes), ``resources`` (custom resources,
    ``{'h1': 1}``): the actor's request; Ray sets the node's ``CUDA_VISIBLE_DEVICES``
    to the GPUs it assigns. ``runtime_env``: Ray's runtime environment of the node
    (``{'pip': [...], 'env_vars': {...}}``), over ``ray_options['runtime_env']``.
    ``scheduling``: ``'DEFAULT'`` or ``'PACK'`` (Ray's default: fill a host before the
    next), ``'SPREAD'`` (over as many hosts as it can), or node labels the host must
    carry (Ray's label selector: ``{'ray.io/accelerator-type': 'H100'}``). ``env``:
    extra variables of the node process. ``nodes_per_actor``: how many of the group's
    nodes share one actor (node i in actor i // k), which asks k times the above and
    splits its GPUs evenly between them; a Ray worker process costs far more memory than
    a node, so packing is what lets hundreds of small nodes fit on a few hosts. A
    node's crash still restarts only that node; the actor's loss ends all of its nodes.
    """

    num_cpus: float = 1
    num_gpus: float = 0
    memory: int | None = None
    resources: Mapping[str, float] | None = None
    runtime_env: Mapping[str, Any] | None = None
    scheduling: str | Mapping[str, str] = 'DEFAULT'
    env: Mapping[str, str] | None = None
    nodes_per_actor: int = 1

    def __post_init__(self) -> None:
        _number('RayResources', 'num_cpus', self.num_cpus)
        _number('RayResources', 'num_gpus', self.num_gpus)
        if self.memory is not None:
            _number('RayResources', 'memory (bytes)', self.memory, whole=True)
        _str_mapping('RayResources', 'resources', self.resources or {}, "{'h1': 1}")
        for name, amount in (self.resources or {}).items():
            _number('RayResources', f'resources[{name!r}]', amount)
        _str_mapping('RayResources', 'runtime_env', self.runtime_env or {},
                     "{'env_vars': {'A': '1'}}")
        if isinstance(self.scheduling, Mapping):
            _str_mapping('RayResources', 'scheduling (node labels)', self.scheduling,
                         "{'lp-host': 'h1'}")
        elif self.scheduling not in SCHEDULING:
            raise errors.ResourcesError(f"RayResources scheduling must be one of {SCHEDULING} or "
                                        f"a dict of node labels (got {self.scheduling!r})")
        env = self.env or {}
        if not isinstance(env, Mapping) or not all(
                isinstance(k, str) and k.isidentifier() and isinstance(v, str)
                for k, v in env.items()):
            raise errors.ResourcesError(f'RayResources env must map variable names to strings '
                                        f'(got {env!r})')
        if isinstance(self.nodes_per_actor, bool) or not isinstance(self.nodes_per_actor, int) \
                or self.nodes_per_actor < 1:
            raise errors.ResourcesError(f'RayResources nodes_per_actor must be an int >= 1 '
                                        f'(got {self.nodes_per_actor!r})')

    def __hash__(self) -> int:  # Holds dicts; the text says it all.
        return hash(repr(self))

    def bundle(self, nodes: int = 1) -> dict[str, float]:
        """The resources of ``nodes`` nodes as a placement-group bundle (an actor's: all its
        nodes')."""
        bundle = {'CPU': self.num_cpus, 'GPU': self.num_gpus, **(self.resources or {})}
        if self.memory:
            bundle['memory'] = self.memory
        return {name: amount * nodes for name, amount in bundle.items() if amount}


@dataclasses.dataclass(frozen=True)
class RayOptions:
    """The launch-wide options: ``ray_options={...}``.

    ``address``: the cluster (``'auto'``: the one started on this machine with ``ray
    start``; ``'ray://head:10001'``: through Ray Client; ``'10.0.0.1:6379'``); None
    takes ``RAY_ADDRESS``, and without it starts a Ray of its own on this machine.
    ``namespace``: the Ray namespace of the program's actors. ``runtime_env``: every
    node's, under each group's own. ``gang``: the whole program is one placement
    group, placed all at once or not at all; ``gang_strategy``: its strategy (PACK,
    SPREAD, STRICT_PACK, STRICT_SPREAD); ``gang_timeout``: seconds to wait for it
    (the reason it waits is logged meanwhile) before the launch fails.
    ``launcher_address``: this machine's address as the cluster's hosts reach it
    (default: the interface that routes to the head).
    """

    address: str | None = None
    namespace: str | None = None
    runtime_env: Mapping[str, Any] | None = None
    gang: bool = False
    gang_strategy: str = 'PACK'
    gang_timeout: float = 300.0
    launcher_address: str | None = None

    @classmethod
    def from_dict(cls, given: Mapping[str, Any] | None) -> 'RayOptions':
        made = cls(**options.only_known_keys('ray_options', given, cls))
        made.check()
        return made

    def check(self) -> None:
        for key in ('address', 'namespace', 'launcher_address'):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, str) or not value):
                raise errors.ResourcesError(f'ray_options[{key!r}] must be a non-empty string or '
                                            f'None (got {value!r})')
        _str_mapping('ray_options', "['runtime_env']", self.runtime_env or {},
                     "{'env_vars': {'A': '1'}}")
        if not isinstance(self.gang, bool):
            raise errors.ResourcesError(f"ray_options['gang'] must be True or False "
                                        f'(got {self.gang!r})')
        strategies = ('PACK', 'SPREAD', 'STRICT_PACK', 'STRICT_SPREAD')
        if self.gang_strategy not in strategies:
            raise errors.ResourcesError(f"ray_options['gang_strategy'] must be one of "
                                        f'{strategies} (got {self.gang_strategy!r})')
        timeout = self.gang_timeout
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise errors.ResourcesError(f"ray_options['gang_timeout'] must be seconds > 0 "
                                        f'(got {timeout!r})')

    def cluster_address(self) -> str:
        """Where to connect: the option, else ``RAY_ADDRESS``, else ``'local'`` (a new Ray here)."""
        return self.address or os.environ.get('RAY_ADDRESS') or 'local'


def resources_of_groups(group_labels, resources: Mapping[str, Any]) -> dict[str, RayResources]:
    """Each group's ``RayResources`` (the default one where none is given)."""
    return options.specs_of_groups(group_labels, resources, RayResources, 'ray')
