"""The public surface is curated: this list pins what `import launchpad_py as lp` offers."""

import launchpad_py as lp

EXPECTED = {
    'AbstractAddressBuilder', 'Address', 'CourierClient', 'CourierHandle', 'CourierNode',
    'Handle', 'LaunchError', 'LaunchType', 'LaunchpadError', 'NodeFailedError',
    'NodeSerializationError', 'NodeState', 'NodeStatus', 'NotRunningError', 'Program',
    'ProgramController', 'ProgramError', 'PyClassNode', 'PyNode', 'PythonProcess',
    'ResourcesError', 'SimpleLocalAddressBuilder', 'UnknownLaunchTypeError', 'courier', 'flags',
    'get_port_from_address', 'is_local_launch', 'is_local_launch_or_test', 'launch',
    'make_program_stopper', 'register_stop_handler', 'stop', 'stop_event',
    'unregister_stop_handler', 'wait_for_stop',
}


def test_exported_names_are_pinned():
    """Adding or removing a public name is a deliberate change to this list."""
    exported = {name for name in dir(lp) if not name.startswith('_')}
    exported -= {'errors', 'launchers', 'nodes', 'program', 'runtime'}  # Subpackages.
    assert exported == EXPECTED


def test_launch_type_names():
    """Launch types are an enum whose values are the launcher names."""
    assert [t.value for t in lp.LaunchType] == ['local_mt', 'local_mp', 'test_mt', 'test_mp']
    assert lp.is_local_launch('local_mp') and not lp.is_local_launch('test_mp')
    assert lp.is_local_launch_or_test(lp.LaunchType.TEST_MULTI_THREADING)


def test_flags_are_defined_on_import():
    """--lp_launch_type and --lp_termination_notice_secs exist once the package is imported."""
    assert lp.flags.LAUNCH_TYPE.default == 'local_mt'
    assert lp.flags.TERMINATION_NOTICE_SECS.default == 10
