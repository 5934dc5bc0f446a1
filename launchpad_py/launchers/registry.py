"""Launch types and the registry that maps their names to launchers.

A launcher is a function ``launcher(program, options) -> ProgramController``.
Adding one is adding a module and one line to ``_BUILTIN`` (or calling
``register`` from outside the package).
"""

from __future__ import annotations

import enum
import importlib
from typing import Callable

from launchpad_py import errors


class LaunchType(str, enum.Enum):
    """Names of the built-in launchers; plain strings are accepted too."""

    LOCAL_MULTI_THREADING = 'local_mt'
    LOCAL_MULTI_PROCESSING = 'local_mp'
    TEST_MULTI_THREADING = 'test_mt'
    TEST_MULTI_PROCESSING = 'test_mp'
    SSH = 'ssh'
    SLURM = 'slurm'
    KUBERNETES = 'kubernetes'

    def __str__(self) -> str:
        return self.value


_BUILTIN = {
    'local_mt': 'launchpad_py.launchers.local_threads:launch_local',
    'test_mt': 'launchpad_py.launchers.local_threads:launch_test',
    'local_mp': 'launchpad_py.launchers.local_processes:launch_local',
    'test_mp': 'launchpad_py.launchers.local_processes:launch_test',
    'ssh': 'launchpad_py.launchers.ssh:launch_ssh',
    'slurm': 'launchpad_py.launchers.slurm:launch_slurm',
    'kubernetes': 'launchpad_py.launchers.kubernetes:launch_kubernetes',
}
_registered: dict[str, Callable] = {}


def register(name: str, launcher: Callable) -> None:
    """Makes ``lp.launch(p, launch_type=name)`` use ``launcher``."""
    _registered[name] = launcher


def known_names() -> list[str]:
    return sorted(set(_BUILTIN) | set(_registered))


def lookup(launch_type) -> tuple[str, Callable]:
    """The canonical name and launcher for an enum member or string."""
    name = launch_type.value if isinstance(launch_type, LaunchType) else launch_type
    if name in _registered:
        return name, _registered[name]
    if name in _BUILTIN:
        module_name, function_name = _BUILTIN[name].split(':')
        return name, getattr(importlib.import_module(module_name), function_name)
    raise errors.UnknownLaunchTypeError(
        f'unknown launch type {launch_type!r}; known: {", ".join(known_names())} '
        '(pass launch_type=... or --lp_launch_type=...)')


def is_local_launch(launch_type) -> bool:
    return lookup(launch_type)[0] in ('local_mt', 'local_mp')


def is_local_launch_or_test(launch_type) -> bool:
    return lookup(launch_type)[0] in ('local_mt', 'local_mp', 'test_mt', 'test_mp')
