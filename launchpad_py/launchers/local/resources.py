"""Per-group resources for launchers that run local processes.

    lp.launch(p, launch_type='local_mp', local_resources={
        'learner': lp.PythonProcess(gpus=[0], jax_preallocate=False),
        'actor': lp.PythonProcess(gpus=[], jax_platforms='cpu'),
    })
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Mapping

from launchpad_py.courier import open_files
from launchpad_py.node_side import devices
from launchpad_py import errors


@dataclasses.dataclass
class PythonProcess:
    """How to start the processes of one group.

    ``args``: extra command-line flags for the node processes (parsed with
    absl, after the launching script's own flags, so they override them).
    ``env``: variables added to the node processes' environment.
    ``interpreter``: the Python executable (default: the launcher's own).
    ``gpus``: GPU indices (or UUIDs) the group may see, as
    ``CUDA_VISIBLE_DEVICES``; ``[]`` hides every GPU (and JAX then runs on the
    CPU); ``None`` leaves the launcher's visibility alone.
    ``jax_preallocate``, ``jax_memory_fraction``, ``jax_platforms``: JAX presets,
    set as ``XLA_PYTHON_CLIENT_PREALLOCATE``, ``XLA_PYTHON_CLIENT_MEM_FRACTION``
    and ``JAX_PLATFORMS`` (see docs/gpus.md).
    """

    args: list[str] | tuple[str, ...] = ()
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    interpreter: str = sys.executable
    gpus: list[int | str] | tuple[int | str, ...] | None = None
    jax_preallocate: bool | None = None
    jax_memory_fraction: float | None = None
    jax_platforms: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.args, str) or not all(isinstance(a, str) for a in self.args):
            raise TypeError(f'PythonProcess args must be a list of strings (got {self.args!r})')
        bad = {k: v for k, v in self.env.items() if not isinstance(k, str) or not isinstance(v, str)}
        if bad:
            raise TypeError(f'PythonProcess env keys and values must be strings (got {bad!r})')
        self._check_gpus()
        self._check_jax()
        clashes = sorted(k for k, v in self._presets().items() if self.env.get(k, v) != v)
        if clashes:
            raise errors.ResourcesError(
                f'PythonProcess sets {clashes} both in env and through gpus/jax_* '
                f'(env={ {k: self.env[k] for k in clashes} }, presets='
                f'{ {k: self._presets()[k] for k in clashes} }); keep one of them')

    def _check_gpus(self) -> None:
        if self.gpus is None:
            return
        if isinstance(self.gpus, (str, int)) or not all(
                (isinstance(g, int) and not isinstance(g, bool) and g >= 0)
                or (isinstance(g, str) and g) for g in self.gpus):
            raise TypeError(f'PythonProcess gpus must be a list of GPU indices or UUIDs, such '
                            f'as [0, 1] or [] for none (got {self.gpus!r})')

    def _check_jax(self) -> None:
        if self.jax_preallocate is not None and not isinstance(self.jax_preallocate, bool):
            raise TypeError(f'PythonProcess jax_preallocate must be True or False '
                            f'(got {self.jax_preallocate!r})')
        fraction = self.jax_memory_fraction
        if fraction is not None and (isinstance(fraction, bool) or not isinstance(
                fraction, (int, float)) or not 0 < fraction <= 1):
            raise ValueError(f'PythonProcess jax_memory_fraction must be in (0, 1], e.g. 0.45 '
                             f'(got {fraction!r})')
        if self.jax_platforms is not None and (not isinstance(self.jax_platforms, str)
                                               or not self.jax_platforms):
            raise TypeError(f"PythonProcess jax_platforms must be a string such as 'cpu' or "
                            f"'cuda,cpu' (got {self.jax_platforms!r})")

    def _presets(self) -> dict[str, str]:
        presets = {}
        if self.gpus is not None:
            presets['CUDA_VISIBLE_DEVICES'] = ','.join(str(g) for g in self.gpus)
        if self.jax_preallocate is not None:
            presets['XLA_PYTHON_CLIENT_PREALLOCATE'] = 'true' if self.jax_preallocate else 'false'
        if self.jax_memory_fraction is not None:
            presets['XLA_PYTHON_CLIENT_MEM_FRACTION'] = f'{self.jax_memory_fraction:g}'
        if self.jax_platforms is not None:
            presets['JAX_PLATFORMS'] = self.jax_platforms
        return presets

    def environment(self) -> dict[str, str]:
        """The variables the group's processes get on top of the launcher's environment."""
        return {**self.env, **self._presets()}

    @property
    def controls_gpus(self) -> bool:
        """True when the group says which GPUs it sees (``gpus`` or ``CUDA_VISIBLE_DEVICES``)."""
        return self.gpus is not None or 'CUDA_VISIBLE_DEVICES' in self.env


def apply_gpu_defaults(
        resources: dict[str, PythonProcess], process_counts: dict[str, int],
        launcher_env: Mapping[str, str]) -> tuple[dict[str, PythonProcess], list[str]]:
    """Each group's resources with the GPU defaults of docs/gpus.md, and what to log about them.

    ``process_counts`` maps every group of the program to its number of
    processes. No group loses a GPU it would otherwise see: a group that names
    no GPUs sees the launcher's. A group that sees none runs JAX on the CPU; groups
    whose processes may meet on one GPU do not preallocate its memory.
    """
    groups = list(process_counts)
    specs = {g: resources.get(g, PythonProcess()) for g in groups}
    visible = {g: devices.visible_gpus(specs[g].environment().get(
        'CUDA_VISIBLE_DEVICES', launcher_env.get('CUDA_VISIBLE_DEVICES'))) for g in groups}
    sharing = [g for g in groups if devices.may_share(visible[g], visible[g]) and (
        process_counts[g] > 1 or any(devices.may_share(visible[g], visible[o])
                                     for o in groups if o != g and process_counts[o]))]
    result, shared_jax = dict(resources), []
    for group in groups:
        own = specs[group].environment()
        if visible[group] == frozenset():
            extra = devices.hidden_environment(own)
        elif group in sharing:
            extra = devices.sharing_environment({**launcher_env, **own})
            shared_jax += [group] if 'XLA_PYTHON_CLIENT_PREALLOCATE' in extra else []
        else:
            extra = {}
        if extra:
            result[group] = dataclasses.replace(specs[group], env={**specs[group].env, **extra})
    return result, _gpu_log_lines(specs, visible, process_counts, shared_jax)


def _gpu_log_lines(specs: dict[str, PythonProcess], visible: dict, process_counts: dict[str, int],
                   shared_jax: list[str]) -> list[str]:
    lines = []
    hidden = [g for g, spec in specs.items() if spec.controls_gpus and visible[g] == frozenset()]
    if hidden:
        lines.append(f'{_names(hidden)} run without GPUs (CUDA_VISIBLE_DEVICES=\'\'; JAX on the '
                     f'CPU unless jax_platforms says otherwise)')
    if shared_jax and devices.machine_has_gpus():
        count = sum(process_counts[g] for g in shared_jax)
        lines.append(f'{count} processes of {_names(shared_jax)} may use the same GPUs, so JAX '
                     f'preallocates no GPU memory in them; give groups their own gpus=[...], or '
                     f'set jax_preallocate or jax_memory_fraction, to choose')
    return lines


def _names(groups: list[str]) -> str:
    return ('group ' if len(groups) == 1 else 'groups ') + ', '.join(repr(g) for g in groups)


#: What the launching process itself holds open besides its nodes' share.
_BASE_FILES = 64


def check_open_files(program: str, launch_type: str, nodes: int, per_node: int) -> None:
    """Raises this process's soft open-file limit; a LaunchError naming it if even the hard
    limit is too low for ``nodes`` nodes needing about ``per_node`` descriptors each here."""
    problem = open_files.shortfall(_BASE_FILES + per_node * nodes,
                                   f'{launch_type} program {program!r} of {nodes} nodes')
    if problem is not None:
        raise errors.LaunchError(problem)
