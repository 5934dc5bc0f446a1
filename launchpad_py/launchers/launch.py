"""``lp.launch``: picks a launcher from the registry and starts programs with it."""

from __future__ import annotations

import atexit
import threading
from typing import Any, Mapping, Sequence

from launchpad_py import errors, flags, process_limits
from launchpad_py.supervision import controller
from launchpad_py.launchers import gc_pause, registry, signals
from launchpad_py.launchers.options import LaunchOptions
from launchpad_py.program import Program
from launchpad_py.program import graph as program_graph


def launch(programs: Program | Sequence[Program], launch_type=None, xm_resources: Any = None,
           local_resources: Mapping[str, Any] | None = None, test_case: Any = None,
           terminal: str | None = None, *, serialize_py_nodes: bool | None = None,
           resources: Mapping[str, Any] | None = None, dashboard: bool | None = None,
           kubernetes_options: Mapping[str, Any] | None = None,
           slurm_options: Mapping[str, Any] | None = None,
           ray_options: Mapping[str, Any] | None = None,
           failure_policy: Mapping[str, Any] | None = None):
    """Launches one program (returns its controller) or several (returns a list).

    ``launch_type`` is a ``LaunchType`` or its name; by default the value of
    ``--lp_launch_type``. ``resources`` maps group labels to the launcher's
    resource type (``lp.PythonProcess`` for local_mp, ``lp.SshHost`` for ssh,
    ``lp.SlurmResources`` for slurm); ``local_resources`` is its older name.
    ``dashboard=True`` (default: ``--lp_dashboard``) serves a web dashboard on loopback
    (see docs/observability.md). ``kubernetes_options`` and ``slurm_options`` are those
    launchers' own (namespace, dry run, ...; time limit, account, ...; see
    docs/launchers.md); ``ray_options`` the ray launcher's (cluster address, gang
    scheduling). ``failure_policy`` maps group labels to ``lp.Restart(...)`` (failed
    nodes are restarted, keeping their address) or ``lp.StopProgram()`` (the default: a
    failure stops the program; see docs/reliability.md). Returns once every courier server
    is listening.

        controller = lp.launch(p, launch_type='local_mp',
                               failure_policy={'actor': lp.Restart(max_restarts=10)})
        controller.wait()
    """
    del xm_resources  # Accepted for compatibility with DeepMind Launchpad; unused locally.
    if launch_type is None:
        launch_type = flags.value_or_default(flags.LAUNCH_TYPE)
    backend = registry.backend(launch_type)
    name, launcher = backend.name, backend.load_launcher()
    if resources is not None and local_resources is not None:
        raise errors.ResourcesError('pass resources= or local_resources= (its older name), '
                                    'not both')
    keyword = 'local_resources' if local_resources is not None else 'resources'
    if resources is not None:
        local_resources = resources
    many = not isinstance(programs, Program)
    program_list = list(programs) if many else [programs]
    for program in program_list:
        if not isinstance(program, Program):
            raise errors.ProgramError(f'lp.launch expects lp.Program objects (got {program!r})')
    options = LaunchOptions.from_flags(local_resources=local_resources, terminal=terminal,
                                       test_case=test_case, serialize_py_nodes=serialize_py_nodes,
                                       dashboard=dashboard, failure_policy=failure_policy,
                                       resources_keyword=keyword)
    options.pick_launcher_options(name, kubernetes_options=kubernetes_options,
                                  slurm_options=slurm_options, ray_options=ray_options)
    for program in program_list:
        program_graph.check_complete(program)
        options.check_resource_groups(program)
        options.check_failure_policy(program)
        backend.check(options, program)
    signals.install_once()
    _register_exit_hook()
    controllers = []
    for program in program_list:
        running = _start(launcher, program, options)
        if options.dashboard:
            port = options.dashboard_port + len(controllers) if options.dashboard_port else 0
            running.open_dashboard(program_graph.structure(program), port)
        if test_case is not None:
            test_case.addCleanup(_stop_and_raise, running)
        controllers.append(running)
    return controllers if many else controllers[0]


def _start(launcher, program: Program, options: LaunchOptions) -> controller.ProgramController:
    """``launcher(program, options)``, with no full garbage collection until it returns
    (``gc_pause``); running out of threads or processes names the limits."""
    try:
        with gc_pause.paused():
            return launcher(program, options)
    except (RuntimeError, OSError) as exc:
        if not process_limits.is_exhausted(exc):
            raise
        raise errors.LaunchError(process_limits.exhausted(
            f'launching program {program.name!r} ({len(program.get_all_nodes())} nodes)')) from exc


def _stop_and_raise(running: controller.ProgramController) -> None:
    """Test cleanup: stop the program; a node failure fails the test."""
    running.stop()
    running.wait()


_hook_registered = False


def _register_exit_hook() -> None:
    global _hook_registered
    if not _hook_registered:
        atexit.register(_at_exit)
        # Python's exit shuts thread pools down before joining non-daemon threads,
        # which would starve the servers of a local_mt program still running. Hooks
        # run newest first, so after the pools' hook is registered (on import of
        # concurrent.futures.thread), ours runs before it and waits for the programs.
        import concurrent.futures.thread  # noqa: F401
        threading._register_atexit(_wait_for_local_programs)
        _hook_registered = True


def _wait_for_local_programs() -> None:
    for program in controller.running_programs():
        if program.keeps_process_alive:
            program.wait_quietly()


def _at_exit() -> None:
    for program in controller.running_programs():  # Test programs nobody stopped.
        program.stop()
    for program in controller.failed_programs():
        program._report_unseen_failure()
