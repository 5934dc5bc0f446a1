"""launchpad_py: write a distributed program as a graph, launch it anywhere.

    import launchpad_py as lp

    p = lp.Program('hello')
    server = p.add_node(lp.CourierNode(Server), label='server')
    p.add_node(lp.PyNode(client_main, server), label='client')
    lp.launch(p, launch_type='local_mp').wait()

Public names resolve on first use (PEP 562 ``__getattr__``): a single-node pod imports
this package on its way to ``node_side``, and loading every launcher, the dashboard and
the submission code there cost it megabytes it never used (issue 25). Only the flags
(defined on import, so ``app.run`` parses ``--lp_*``) and the errors load eagerly.
"""

import importlib as _importlib
from importlib.util import find_spec as _find_spec

# Flags (defined on import: --lp_launch_type, --lp_termination_notice_secs)
from launchpad_py import flags
from launchpad_py.flags import LAUNCH_TYPE

# Public name -> the module that defines it; imported when the name is first read.
_LAZY = {
    # RPC, usable on its own
    'courier': 'launchpad_py.courier',
    'batched_handler': 'launchpad_py.courier',
    # Setup: programs, nodes, handles, addresses
    'AbstractAddressBuilder': 'launchpad_py.program',
    'Address': 'launchpad_py.program',
    'Deferred': 'launchpad_py.program',
    'GroupHandle': 'launchpad_py.program',
    'GroupMembers': 'launchpad_py.program',
    'Handle': 'launchpad_py.program',
    'Program': 'launchpad_py.program',
    'SimpleLocalAddressBuilder': 'launchpad_py.program',
    'get_port_from_address': 'launchpad_py.program',
    'maybe_dereference': 'launchpad_py.program',
    'CourierClient': 'launchpad_py.nodes',
    'CourierHandle': 'launchpad_py.nodes',
    'CourierNode': 'launchpad_py.nodes',
    'PyClassNode': 'launchpad_py.nodes',
    'PyNode': 'launchpad_py.nodes',
    # More node types: caching, colocation, replay (reverb is imported only when used)
    'CacherHandle': 'launchpad_py.nodes',
    'CacherNode': 'launchpad_py.nodes',
    'ColocationHandle': 'launchpad_py.nodes',
    'ColocationNode': 'launchpad_py.nodes',
    'MultiProcessingColocation': 'launchpad_py.nodes',
    'MultiThreadingColocation': 'launchpad_py.nodes',
    'ReverbHandle': 'launchpad_py.nodes',
    'ReverbNode': 'launchpad_py.nodes',
    # Inside a running node
    'NodeContext': 'launchpad_py.node_side.runtime',
    'get_node_context': 'launchpad_py.node_side.runtime',
    'checkpoint_dir': 'launchpad_py.node_side.checkpoints',
    'register_checkpoint_handler': 'launchpad_py.node_side.checkpoints',
    # Launch, and what happens when nodes fail
    'Restart': 'launchpad_py.program.failure_policy',
    'StopProgram': 'launchpad_py.program.failure_policy',
    'LaunchType': 'launchpad_py.launchers',
    'NodeState': 'launchpad_py.launchers',
    'NodeStatus': 'launchpad_py.launchers',
    'ProgramController': 'launchpad_py.launchers',
    'PythonProcess': 'launchpad_py.launchers',
    'RayResources': 'launchpad_py.launchers',
    'SlurmResources': 'launchpad_py.launchers',
    'SshHost': 'launchpad_py.launchers',
    'KubernetesResources': 'launchpad_py.launchers',
    'is_local_launch': 'launchpad_py.launchers',
    'is_local_launch_or_test': 'launchpad_py.launchers',
    'launch': 'launchpad_py.launchers',
    # Programs that outlive the terminal: submitted to a cluster, found again by id
    'submit': 'launchpad_py.submission.submit',
    'SubmittedProgram': 'launchpad_py.submission.submitted',
    'attach': 'launchpad_py.submission.submitted',
    # Stopping a program
    'make_program_stopper': 'launchpad_py.node_side.program_stop',
    'register_stop_handler': 'launchpad_py.node_side.program_stop',
    'stop': 'launchpad_py.node_side.program_stop',
    'stop_event': 'launchpad_py.node_side.program_stop',
    'unregister_stop_handler': 'launchpad_py.node_side.program_stop',
    'wait_for_stop': 'launchpad_py.node_side.program_stop',
    # Errors
    'LaunchError': 'launchpad_py.errors',
    'LaunchpadError': 'launchpad_py.errors',
    'NodeFailedError': 'launchpad_py.errors',
    'NodeSerializationError': 'launchpad_py.errors',
    'NotRunningError': 'launchpad_py.errors',
    'ProgramError': 'launchpad_py.errors',
    'ResourcesError': 'launchpad_py.errors',
    'StuckNodesError': 'launchpad_py.errors',
    'UnknownLaunchTypeError': 'launchpad_py.errors',
}

__all__ = ['flags', 'LAUNCH_TYPE', *_LAZY]


def __getattr__(name):
    """Imports the module behind a public name on first use and keeps the value here."""
    module = _LAZY.get(name)
    if module is None and not name.startswith('_') and _find_spec(f'{__name__}.{name}'):
        module = f'{__name__}.{name}'  # a subpackage the eager __init__ had loaded: lp.launchers
    if module is None:
        raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
    loaded = _importlib.import_module(module)
    value = loaded if module == f'{__name__}.{name}' else getattr(loaded, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
