"""The public surface is curated: these lists pin what `import launchpad_py as lp` offers."""

import datetime
import inspect
import types

import launchpad_py as lp

E = inspect.Parameter.empty
# Every name DeepMind Launchpad exports (plus the ones it documents but forgot to export),
# with the parameters it takes: (name, kind, default). Kinds: P = positional-or-keyword,
# V = *args, K = keyword-only, KW = **kwargs.
ORIGINAL = {
    'flags': None, 'LaunchType': None, 'LAUNCH_TYPE': None, 'courier': None,
    'is_local_launch': [('launch_type', 'P', E)],
    'is_local_launch_or_test': [('launch_type', 'P', E)],
    'Program': [('name', 'P', E)],
    'launch': [('programs', 'P', E), ('launch_type', 'P', None), ('xm_resources', 'P', None),
               ('local_resources', 'P', None), ('test_case', 'P', None), ('terminal', 'P', None),
               ('serialize_py_nodes', 'K', None), ('resources', 'K', None),
               ('dashboard', 'K', None)],
    'CourierNode': [('constructor', 'P', E), ('args', 'V', E), ('courier_kwargs', 'K', None),
                    ('courier_client_kwargs', 'K', None), ('kwargs', 'KW', E)],
    'CourierHandle': [('address', 'P', E), ('client_kwargs', 'KW', E)],
    'CourierClient': [('server_address', 'P', E), ('compress', 'P', False),
                      ('call_timeout', 'P', None), ('wait_for_ready', 'P', True)],
    'PyNode': [('function', 'P', E), ('args', 'V', E), ('kwargs', 'KW', E)],
    'PyClassNode': [('constructor', 'P', E), ('args', 'V', E), ('kwargs', 'KW', E)],
    'MultiThreadingColocation': [('nodes', 'P', E), ('return_on_first_completed', 'P', False)],
    'MultiProcessingColocation': [('nodes', 'P', E), ('num_retries_on_failure', 'P', 0)],
    'ReverbNode': [('priority_tables_fn', 'P', E), ('checkpoint_ctor', 'P', None),
                   ('checkpoint_time_delta_minutes', 'P', None)],
    'CacherNode': [('handle', 'P', E), ('refresh_interval_ms', 'P', 1000),
                   ('stale_after_ms', 'P', 10000), ('num_caches', 'P', 1),
                   ('courier_kwargs', 'K', None), ('courier_client_kwargs', 'K', None)],
    'batched_handler': [('batch_size', 'P', E), ('max_parallelism', 'P', 1),
                        ('timeout', 'P', datetime.timedelta(milliseconds=200)),
                        ('pad_batch', 'P', False)],
    'PythonProcess': None,
    'Address': [('name', 'P', 'default')],
    'AbstractAddressBuilder': None,
    'SimpleLocalAddressBuilder': None,
    'get_port_from_address': [('address', 'P', E)],
    'stop': [],
    'wait_for_stop': [('timeout_secs', 'P', None), ('timeout', 'K', None)],
    'stop_event': [],
    'register_stop_handler': [('handler', 'P', E)],
    'unregister_stop_handler': [('handler', 'P', E)],
    'make_program_stopper': [('launch_type', 'P', None)],
    'Deferred': [('constructor', 'P', E), ('args', 'V', E), ('kwargs', 'KW', E)],
    'maybe_dereference': [('obj', 'P', E)],
}
# Names of our own.
OURS = {
    'CacherHandle', 'ColocationHandle', 'ColocationNode', 'GroupHandle', 'GroupMembers',
    'Handle', 'KubernetesResources', 'LaunchError',
    'LaunchpadError', 'NodeContext', 'NodeFailedError', 'NodeSerializationError', 'NodeState',
    'NodeStatus', 'NotRunningError', 'ProgramController', 'ProgramError', 'RayResources', 'ResourcesError',
    'ReverbHandle', 'Restart', 'SlurmResources', 'SshHost', 'StopProgram', 'StuckNodesError',
    'UnknownLaunchTypeError', 'get_node_context', 'checkpoint_dir', 'register_checkpoint_handler',
    'submit', 'attach', 'SubmittedProgram',
}
_KINDS = {inspect.Parameter.POSITIONAL_OR_KEYWORD: 'P', inspect.Parameter.VAR_POSITIONAL: 'V',
          inspect.Parameter.KEYWORD_ONLY: 'K', inspect.Parameter.VAR_KEYWORD: 'KW'}


def _parameters(obj):
    return [(p.name, _KINDS[p.kind], p.default)
            for p in inspect.signature(obj).parameters.values()]


def test_exported_names_are_pinned():
    """Adding or removing a public name is a deliberate change to these lists."""
    exported = {name for name in dir(lp) if not name.startswith('_')
                and (not isinstance(getattr(lp, name), types.ModuleType)
                     or name in ('courier', 'flags'))}
    assert exported == set(ORIGINAL) | OURS


def test_original_signatures_are_kept():
    """Every original name takes the parameters DeepMind Launchpad's does.

    Ours may add keyword-only parameters with defaults after them: every call
    written for the original still binds the same way.
    """
    for name, expected in ORIGINAL.items():
        if expected is None:
            continue
        ours = _parameters(getattr(lp, name))
        assert ours[:len(expected)] == expected, name
        for extra_name, kind, default in ours[len(expected):]:
            assert kind == 'K' and default is not E, (name, extra_name)


def test_launch_type_names():
    """Launch types are an enum whose values are the launcher names."""
    assert [t.value for t in lp.LaunchType] == ['local_mt', 'local_mp', 'test_mt', 'test_mp', 'ssh',
                                                'slurm', 'kubernetes', 'ray']
    assert not lp.is_local_launch('ssh') and not lp.is_local_launch_or_test('ssh')
    assert not lp.is_local_launch('slurm') and not lp.is_local_launch_or_test('slurm')
    assert lp.is_local_launch('local_mp') and not lp.is_local_launch('test_mp')
    assert lp.is_local_launch_or_test(lp.LaunchType.TEST_MULTI_THREADING)


def test_flags_are_defined_on_import():
    """--lp_launch_type and --lp_termination_notice_secs exist once the package is imported."""
    assert lp.flags.LAUNCH_TYPE.default == 'local_mt'
    assert lp.LAUNCH_TYPE.name == 'lp_launch_type'
    assert lp.flags.TERMINATION_NOTICE_SECS.default == 10


def test_courier_module_offers_the_original_names():
    """`courier` (as `import courier` sees it under compat) has Server, Client, list_methods."""
    from launchpad_py.compat import courier as original_courier
    for name in ('Server', 'Client', 'list_methods', 'batched_handler'):
        assert hasattr(original_courier, name), name
