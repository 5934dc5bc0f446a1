"""The options of ``lp.launch`` as one value (what each launcher supports: ``registry``)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from launchpad_py import errors, flags
from launchpad_py.program import failure_policy
from launchpad_py.program import Program


@dataclasses.dataclass
class LaunchOptions:
    local_resources: Mapping[str, Any] | None = None
    #: The keyword the user gave them by, as errors should name it.
    resources_keyword: str = 'resources'
    terminal: str | None = None
    test_case: Any = None
    serialize_py_nodes: bool | None = None
    grace: float = 10.0
    ready_timeout: float | None = 300.0
    dashboard: bool = False
    dashboard_port: int = 0
    #: Group label -> lp.Restart(...) or lp.StopProgram(); groups not named stop the program.
    failure_policy: Mapping[str, Any] | None = None
    #: The chosen launcher's own options (``kubernetes_options=`` of lp.launch); see ``pick``.
    launcher_options: Mapping[str, Any] | None = None

    @classmethod
    def from_flags(cls, **kwargs) -> 'LaunchOptions':
        grace = float(flags.value_or_default(flags.TERMINATION_NOTICE_SECS))
        if kwargs.get('dashboard') is None:
            kwargs['dashboard'] = bool(flags.value_or_default(flags.DASHBOARD))
        port = int(flags.value_or_default(flags.DASHBOARD_PORT))
        return cls(grace=grace, dashboard_port=port, **kwargs)

    def check_failure_policy(self, program: Program) -> None:
        """Every group the policies name exists, and every policy is one."""
        failure_policy.check(self.failure_policy, program.groups, program.name)

    def pick_launcher_options(self, launch_type: str, **by_keyword) -> None:
        """Keeps the ``<launch_type>_options=`` keyword's value; another launcher's is an error.

            options.pick_launcher_options('kubernetes', kubernetes_options={...}, slurm_options=None)
        """
        for keyword, value in by_keyword.items():
            if value is None:
                continue
            owner = keyword.removesuffix('_options')
            if owner != launch_type:
                raise errors.ProgramError(
                    f'{keyword}= belongs to launch_type={owner!r}, but this launch is '
                    f'{launch_type!r}; drop it or launch with launch_type={owner!r}')
            if not isinstance(value, Mapping):
                raise TypeError(f"{keyword} must be a dict such as {{'namespace': 'research'}} "
                                f'(got {value!r})')
            self.launcher_options = dict(value)

    def check_resource_groups(self, program: Program) -> None:
        unknown = sorted(set(self.local_resources or {}) - set(program.groups))
        if unknown:
            raise errors.ResourcesError(
                f'resources name groups {unknown} that program {program.name!r} does not '
                f'have; its groups are {sorted(program.groups)}')


def only_known_keys(keyword: str, given: Mapping[str, Any] | None, options_type: type) -> dict:
    """``given`` as a dict, once every key names a field of the dataclass ``options_type``.

    A misspelt launcher option would otherwise be dropped without a word.
    """
    given = dict(given or {})
    known = [field.name for field in dataclasses.fields(options_type)]
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise errors.ResourcesError(f'{keyword} has unknown keys {unknown}; the known ones are '
                                    f'{known}')
    return given


def specs_of_groups(group_labels, resources: Mapping[str, Any], spec_type: type,
                    launch_type: str) -> dict:
    """Each group's spec (``spec_type()`` where none is given), each checked to be a
    ``spec_type``: one backend's resources type never stands in for another's."""
    specs = {}
    for label in group_labels:
        spec = resources.get(label, spec_type())
        if not isinstance(spec, spec_type):
            raise errors.ResourcesError(f'resources[{label!r}] must be '
                                        f'lp.{spec_type.__name__}(...) for {launch_type} '
                                        f'(got {spec!r})')
        specs[label] = spec
    return specs
