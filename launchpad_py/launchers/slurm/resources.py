"""``lp.SlurmResources`` (what one group asks of Slurm) and the job-wide ``slurm_options``.

    lp.launch(p, launch_type='slurm', resources={
        'learner': lp.SlurmResources(partition='gpu', gpus=1, cpus=8, mem='32G'),
        'actor': lp.SlurmResources(partition='cpu', cpus=1, mem='2G'),
    }, slurm_options={'time': '02:00:00', 'account': 'my-lab'})

Every node of a group gets what its ``SlurmResources`` asks for; the options
apply to the whole job. Both are checked before anything is submitted.
"""

from __future__ import annotations

import dataclasses
import math
import re
import shlex
from typing import Any, Mapping

from launchpad_py import errors, flags
from launchpad_py.launchers import options
from launchpad_py.launchers.options import specs_of_groups

_MEM = re.compile(r'(\d+)([KMGT]?)', re.IGNORECASE)
_MEGABYTES = {'K': 1 / 1024, 'M': 1, '': 1, 'G': 1024, 'T': 1024 * 1024}


@dataclasses.dataclass(frozen=True)
class SlurmResources:
    """What each node of one group asks Slurm for.

    ``partition``: where the group runs (default: ``--lp_slurm_partition``, else
    the cluster's default); ``cpus``: CPUs per node; ``gpus``: GPUs per node,
    which become ``--gpus`` of the node's job step, so it sees only its own
    (``CUDA_VISIBLE_DEVICES``); ``mem``: memory per node, as Slurm writes it
    (``'32G'``, ``'512M'``, or an int of megabytes); ``env``: extra variables.
    """

    partition: str | None = None
    cpus: int = 1
    gpus: int = 0
    mem: str | int | None = None
    env: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        if self.partition is not None and (not isinstance(self.partition, str)
                                           or not self.partition.strip()):
            raise TypeError(f"SlurmResources partition must be a partition name such as 'gpu' "
                            f'(got {self.partition!r})')
        for name, least in (('cpus', 1), ('gpus', 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f'SlurmResources {name} must be an int >= {least} per node '
                                 f'(got {value!r})')
        self.megabytes()  # Checks mem.
        env = self.env or {}
        if not isinstance(env, Mapping) or not all(
                isinstance(k, str) and k.isidentifier() and isinstance(v, str)
                for k, v in env.items()):
            raise TypeError(f'SlurmResources env must map variable names to strings '
                            f'(got {env!r})')

    def __hash__(self) -> int:  # env is a dict; the text says it all.
        return hash(repr(self))

    def megabytes(self) -> int | None:
        """``mem`` in megabytes (None when unset)."""
        if self.mem is None:
            return None
        if isinstance(self.mem, int) and not isinstance(self.mem, bool) and self.mem > 0:
            return self.mem
        match = _MEM.fullmatch(self.mem.strip()) if isinstance(self.mem, str) else None
        if match is None or int(match.group(1)) == 0:
            raise ValueError(f"SlurmResources mem must be an amount such as '32G', '512M' or an "
                             f'int of megabytes (got {self.mem!r})')
        return max(1, math.ceil(int(match.group(1)) * _MEGABYTES[match.group(2).upper()]))

    def mem_per_cpu(self) -> int | None:
        """Slurm sizes memory per CPU when a job has several tasks: ``mem`` over ``cpus``."""
        megabytes = self.megabytes()
        return None if megabytes is None else math.ceil(megabytes / self.cpus)


#: How nodes map onto job steps: one each, one per host, or per host where that pays.
STEPS = ('node', 'host', 'auto')


@dataclasses.dataclass(frozen=True)
class SlurmOptions:
    """The job-wide options: ``slurm_options={...}`` over the ``--lp_slurm_*`` flags.

    ``time``, ``account``: salloc's ``--time``/``--account``; ``partition``:
    for groups whose resources name none; ``extra_args``: more salloc
    arguments for every component; ``output_dir``: node logs go to
    ``output_dir/<program>-<job id>/``; ``launcher_address``: this machine's
    address as the compute nodes reach it; ``pending_timeout``: seconds a
    pending job may wait before the launch gives up (0: no limit); ``steps``:
    ``'node'`` (a job step per node), ``'host'`` (a step per host, whose agent
    starts that host's nodes; see ``host_steps``) or ``'auto'`` (per host for
    programs of more than 32 nodes that can, else per node); ``elastic_room``:
    how many nodes each elastic group may add beyond its size at launch (the job
    holds their CPUs from the start: Slurm grows no allocation).
    """

    time: str | None = None
    account: str | None = None
    partition: str | None = None
    extra_args: tuple[str, ...] = ()
    output_dir: str = 'lp-slurm-logs'
    launcher_address: str | None = None
    pending_timeout: float = 0.0
    steps: str = 'auto'
    elastic_room: int = 0

    @classmethod
    def from_flags(cls, given: Mapping[str, Any] | None) -> 'SlurmOptions':
        """The flags' values, overridden by the keys of ``given`` that are not None."""
        given = options.only_known_keys('slurm_options', given, cls)
        values = {
            'time': flags.value_or_default(flags.SLURM_TIME) or None,
            'account': flags.value_or_default(flags.SLURM_ACCOUNT) or None,
            'partition': flags.value_or_default(flags.SLURM_PARTITION) or None,
            'extra_args': flags.value_or_default(flags.SLURM_ARGS),
            'output_dir': flags.value_or_default(flags.SLURM_OUTPUT_DIR),
            'launcher_address': flags.value_or_default(flags.SLURM_LAUNCHER_ADDRESS) or None,
            'pending_timeout': flags.value_or_default(flags.SLURM_PENDING_TIMEOUT),
            'steps': 'auto',
            'elastic_room': 0,
        }
        values.update({key: value for key, value in given.items() if value is not None})
        if isinstance(values['extra_args'], str):
            values['extra_args'] = shlex.split(values['extra_args'])
        return cls._checked(values)

    @classmethod
    def _checked(cls, values: dict) -> 'SlurmOptions':
        for key in ('time', 'account', 'partition', 'launcher_address'):
            if values[key] is not None and (not isinstance(values[key], str) or not values[key]):
                raise errors.ResourcesError(f'slurm_options[{key!r}] must be a non-empty string '
                                            f'or None (got {values[key]!r})')
        extra = values['extra_args']
        if not isinstance(extra, (list, tuple)) or not all(isinstance(a, str) for a in extra):
            raise errors.ResourcesError(f"slurm_options['extra_args'] must be a list of salloc "
                                        f"arguments such as ['--qos=high'] (got {extra!r})")
        timeout = values['pending_timeout']
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
            raise errors.ResourcesError(f"slurm_options['pending_timeout'] must be seconds >= 0 "
                                        f'(got {timeout!r})')
        room = values['elastic_room']
        if isinstance(room, bool) or not isinstance(room, int) or room < 0:
            raise errors.ResourcesError(f"slurm_options['elastic_room'] must be an int >= 0: "
                                        f'nodes each elastic group may add (got {room!r})')
        if values['steps'] not in STEPS:
            raise errors.ResourcesError(f"slurm_options['steps'] must be one of {STEPS} "
                                        f"(got {values['steps']!r})")
        if not isinstance(values['output_dir'], str) or not values['output_dir']:
            raise errors.ResourcesError(f"slurm_options['output_dir'] must be a directory path "
                                        f"(got {values['output_dir']!r})")
        return cls(**{**values, 'extra_args': tuple(extra), 'pending_timeout': float(timeout)})


def resources_of_groups(group_labels, resources: Mapping[str, Any],
                        options: SlurmOptions) -> dict[str, SlurmResources]:
    """Each group's ``SlurmResources`` (the default one where none is given), partition filled in."""
    result = specs_of_groups(group_labels, resources, SlurmResources, 'slurm')
    for label, spec in result.items():
        if spec.partition is None and options.partition is not None:
            result[label] = dataclasses.replace(spec, partition=options.partition)
    return result
