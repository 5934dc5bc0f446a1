"""Launch types: the one place that knows each backend, what it takes and what it can do.

A backend is a ``Backend``: its name (the ``launch_type``), its launcher function
``launcher(program, options) -> ProgramController``, the type of its per-group
``resources=`` and of its ``<name>_options=``, and its ``Capabilities``. Every "this
launcher cannot ..." error comes from here, before the launcher runs. Adding a
backend is adding a folder under ``launchers/`` and one entry in ``_BUILTIN``; a
package of its own adds one through the ``launchpad_py.launchers`` entry-point group
(the entry point names a ``Backend``, or a bare launcher function)::

    [project.entry-points."launchpad_py.launchers"]
    my_cluster = "my_package.launcher:BACKEND"

``register(name, launcher)`` does the same from code. Targets are ``'module:attribute'``
strings, imported on first use, so a backend's dependencies load only when it runs.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import importlib.metadata
from typing import Any, Callable, Iterable

from launchpad_py import errors
from launchpad_py.program import failure_policy

#: The entry-point group through which installed packages add launch types.
ENTRY_POINT_GROUP = 'launchpad_py.launchers'


class LaunchType(str, enum.Enum):
    """Names of the built-in launchers; plain strings are accepted too."""

    LOCAL_MULTI_THREADING = 'local_mt'
    LOCAL_MULTI_PROCESSING = 'local_mp'
    TEST_MULTI_THREADING = 'test_mt'
    TEST_MULTI_PROCESSING = 'test_mp'
    SSH = 'ssh'
    SLURM = 'slurm'
    KUBERNETES = 'kubernetes'
    RAY = 'ray'

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a backend can do beyond starting and stopping nodes.

    ``restarts``: honours ``lp.Restart`` policies; ``elastic_groups``: adds and removes
    nodes of a running program; ``gpus``: its resources can give a node GPUs;
    ``terminal``: takes ``terminal=`` (where node output goes).
    """

    restarts: bool = False
    elastic_groups: bool = False
    gpus: bool = False
    terminal: bool = False


@dataclasses.dataclass(frozen=True)
class Backend:
    """One launch type. Types and the launcher may be ``'module:attribute'`` strings.

    ``resources``: the type of a group's spec in ``resources=`` (None: takes none;
    ``why_no_resources`` says why); ``options``: the type behind ``<name>_options=``.
    ``capabilities`` None means undeclared (a launcher registered as a bare function):
    nothing is refused up front, and the controller checks what its workers can do.
    ``for_tests``: a test variant, not suggested in messages.
    """

    name: str
    launcher: str | Callable
    resources: str | type | None = None
    options: str | type | None = None
    capabilities: Capabilities | None = Capabilities()
    why_no_resources: str = ''
    for_tests: bool = False

    def load_launcher(self) -> Callable:
        return _load(self.launcher)

    def resources_type(self) -> type | None:
        return None if self.resources is None else _load(self.resources)

    def check(self, options: Any, program: Any) -> None:
        """Raises for each option of the launch that this backend cannot honour."""
        capabilities = self.capabilities
        if capabilities is None:
            return
        restarted = sorted(group for group, policy in (options.failure_policy or {}).items()
                           if isinstance(policy, failure_policy.Restart))
        if restarted and not capabilities.restarts:
            raise errors.ProgramError(
                f'{self.name} cannot restart nodes, but failure_policy gives lp.Restart to '
                f'groups {restarted}; give them lp.StopProgram() or launch with '
                f'{_able("restarts")}')
        if program.elastic_groups and not capabilities.elastic_groups:
            raise errors.ProgramError(
                f'{self.name} cannot add or remove nodes while a program runs, so groups '
                f'{sorted(program.elastic_groups)} cannot be elastic; launch with '
                f'{_able("elastic_groups")}, or declare them with program.group(label) instead')
        if options.local_resources and self.resources is None:
            who = ' '.join(filter(None, [self.name, self.why_no_resources]))
            raise errors.ResourcesError(
                f'{who} cannot apply {options.resources_keyword}= (got groups '
                f'{sorted(options.local_resources)}); launch with {_able("resources")}')
        if options.terminal and not capabilities.terminal:
            raise errors.ProgramError(
                f'{self.name} does not take a terminal (got {options.terminal!r}); terminal '
                f'modes belong to {_able("terminal")}')


def _load(target: str | Any) -> Any:
    if not isinstance(target, str):
        return target
    module_name, attribute = target.split(':')
    return getattr(importlib.import_module(module_name), attribute)


_LOCAL = 'launchpad_py.launchers.local'
_BUILTIN = {backend.name: backend for backend in [
    Backend('local_mt', f'{_LOCAL}.threads:launch_local',
            capabilities=Capabilities(restarts=True, elastic_groups=True),
            why_no_resources='runs every node in this process and'),
    Backend('test_mt', f'{_LOCAL}.threads:launch_test', for_tests=True,
            capabilities=Capabilities(restarts=True, elastic_groups=True),
            why_no_resources='runs every node in this process and'),
    Backend('local_mp', f'{_LOCAL}.processes:launch_local', f'{_LOCAL}.resources:PythonProcess',
            capabilities=Capabilities(restarts=True, elastic_groups=True, gpus=True,
                                      terminal=True)),
    Backend('test_mp', f'{_LOCAL}.processes:launch_test', f'{_LOCAL}.resources:PythonProcess',
            for_tests=True, capabilities=Capabilities(restarts=True, elastic_groups=True,
                                                      gpus=True, terminal=True)),
    # Remote backends stream node output back: terminal= picks how (remote/launch.py checks).
    Backend('ssh', 'launchpad_py.launchers.ssh.launch:launch_ssh',
            'launchpad_py.launchers.ssh.host:SshHost',
            capabilities=Capabilities(restarts=True, elastic_groups=True, gpus=True,
                                      terminal=True)),
    # A node added later runs in the room the job holds for it (slurm_options elastic_room).
    Backend('slurm', 'launchpad_py.launchers.slurm.launch:launch_slurm',
            'launchpad_py.launchers.slurm.resources:SlurmResources',
            'launchpad_py.launchers.slurm.resources:SlurmOptions',
            capabilities=Capabilities(restarts=True, elastic_groups=True, gpus=True,
                                      terminal=True)),
    # A restart is a new pod at a new address, which its clients look up again.
    Backend('kubernetes', 'launchpad_py.launchers.kubernetes.launch:launch_kubernetes',
            'launchpad_py.launchers.kubernetes.resources:KubernetesResources',
            'launchpad_py.launchers.kubernetes.resources:KubernetesOptions',
            capabilities=Capabilities(restarts=True, elastic_groups=True, gpus=True,
                                      terminal=True)),
    # Ray places each node in an actor (a restart: a new actor on the same Ray node).
    Backend('ray', 'launchpad_py.launchers.ray.launch:launch_ray',
            'launchpad_py.launchers.ray.resources:RayResources',
            'launchpad_py.launchers.ray.resources:RayOptions',
            capabilities=Capabilities(restarts=True, elastic_groups=True, gpus=True,
                                      terminal=True)),
]}
_registered: dict[str, Backend] = {}


def register(name: str, launcher: Callable | Backend) -> None:
    """Makes ``lp.launch(p, launch_type=name)`` use ``launcher`` (a function or a ``Backend``)."""
    _registered[name] = _as_backend(name, launcher)


def _as_backend(name: str, target: Any) -> Backend:
    if isinstance(target, Backend):
        return dataclasses.replace(target, name=name) if target.name != name else target
    if not callable(target):
        raise TypeError(f'launch type {name!r} must be a launcher function or a '
                        f'launchpad_py.launchers.registry.Backend (got {target!r})')
    return Backend(name, target, capabilities=None)


def _plugins() -> dict[str, importlib.metadata.EntryPoint]:
    return {entry.name: entry for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def known_names() -> list[str]:
    return sorted(set(_BUILTIN) | set(_registered) | set(_plugins()))


def backends() -> list[Backend]:
    """The built-in backends and those registered so far (plugins are loaded on first use)."""
    return list(_BUILTIN.values()) + [b for n, b in _registered.items() if n not in _BUILTIN]


def backend(launch_type) -> Backend:
    """The backend of an enum member or name: registered, built in, or an installed plugin."""
    name = launch_type.value if isinstance(launch_type, LaunchType) else launch_type
    if name in _registered:
        return _registered[name]
    if name in _BUILTIN:
        return _BUILTIN[name]
    plugin = _plugins().get(name)
    if plugin is not None:
        _registered[name] = _as_backend(name, plugin.load())
        return _registered[name]
    raise errors.UnknownLaunchTypeError(
        f'unknown launch type {launch_type!r}; known: {", ".join(known_names())} '
        '(pass launch_type=... or --lp_launch_type=...)')


def lookup(launch_type) -> tuple[str, Callable]:
    """The canonical name and launcher function for an enum member or name."""
    found = backend(launch_type)
    return found.name, found.load_launcher()


def _able(capability: str) -> str:
    """The backends (not test variants) that can do ``capability``, for messages."""
    return _or(b.name for b in backends() if not b.for_tests and (
        b.resources is not None if capability == 'resources' else
        b.capabilities is not None and getattr(b.capabilities, capability)))


def _or(names: Iterable[str]) -> str:
    names = list(names)
    return ', '.join(names[:-1]) + ' or ' + names[-1] if len(names) > 1 else ''.join(names)


def is_local_launch(launch_type) -> bool:
    return backend(launch_type).name in ('local_mt', 'local_mp')


def is_local_launch_or_test(launch_type) -> bool:
    return backend(launch_type).name in ('local_mt', 'local_mp', 'test_mt', 'test_mp')
