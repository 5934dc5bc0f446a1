"""launchpad_py: write a distributed program as a graph, launch it anywhere.

    import launchpad_py as lp

    p = lp.Program('hello')
    server = p.add_node(lp.CourierNode(Server), label='server')
    p.add_node(lp.PyNode(client_main, server), label='client')
    lp.launch(p, launch_type='local_mp').wait()
"""

# Flags (defined on import: --lp_launch_type, --lp_termination_notice_secs)
from launchpad_py import flags
from launchpad_py.flags import LAUNCH_TYPE

# RPC, usable on its own
from launchpad_py import courier
from launchpad_py.courier import batched_handler

# Setup: programs, nodes, handles, addresses
from launchpad_py.program import AbstractAddressBuilder
from launchpad_py.program import Address
from launchpad_py.program import Deferred
from launchpad_py.program import GroupHandle
from launchpad_py.program import GroupMembers
from launchpad_py.program import Handle
from launchpad_py.program import Program
from launchpad_py.program import SimpleLocalAddressBuilder
from launchpad_py.program import get_port_from_address
from launchpad_py.program import maybe_dereference
from launchpad_py.nodes import CourierClient
from launchpad_py.nodes import CourierHandle
from launchpad_py.nodes import CourierNode
from launchpad_py.nodes import PyClassNode
from launchpad_py.nodes import PyNode

# More node types: caching, colocation, replay (reverb is imported only when used)
from launchpad_py.nodes import CacherHandle
from launchpad_py.nodes import CacherNode
from launchpad_py.nodes import ColocationHandle
from launchpad_py.nodes import ColocationNode
from launchpad_py.nodes import MultiProcessingColocation
from launchpad_py.nodes import MultiThreadingColocation
from launchpad_py.nodes import ReverbHandle
from launchpad_py.nodes import ReverbNode

# Inside a running node
from launchpad_py.node_side.runtime import NodeContext
from launchpad_py.node_side.runtime import get_node_context
from launchpad_py.node_side.checkpoints import checkpoint_dir
from launchpad_py.node_side.checkpoints import register_checkpoint_handler

# Launch, and what happens when nodes fail
from launchpad_py.program.failure_policy import Restart
from launchpad_py.program.failure_policy import StopProgram
from launchpad_py.launchers import LaunchType
from launchpad_py.launchers import NodeState
from launchpad_py.launchers import NodeStatus
from launchpad_py.launchers import ProgramController
from launchpad_py.launchers import PythonProcess
from launchpad_py.launchers import RayResources
from launchpad_py.launchers import SlurmResources
from launchpad_py.launchers import SshHost
from launchpad_py.launchers import KubernetesResources
from launchpad_py.launchers import is_local_launch
from launchpad_py.launchers import is_local_launch_or_test
from launchpad_py.launchers import launch

# Programs that outlive the terminal: submitted to a cluster, found again by id
from launchpad_py.submission.submit import submit
from launchpad_py.submission.submitted import SubmittedProgram
from launchpad_py.submission.submitted import attach

# Stopping a program
from launchpad_py.node_side.program_stop import make_program_stopper
from launchpad_py.node_side.program_stop import register_stop_handler
from launchpad_py.node_side.program_stop import stop
from launchpad_py.node_side.program_stop import stop_event
from launchpad_py.node_side.program_stop import unregister_stop_handler
from launchpad_py.node_side.program_stop import wait_for_stop

# Errors
from launchpad_py.errors import LaunchError
from launchpad_py.errors import LaunchpadError
from launchpad_py.errors import NodeFailedError
from launchpad_py.errors import NodeSerializationError
from launchpad_py.errors import NotRunningError
from launchpad_py.errors import ProgramError
from launchpad_py.errors import ResourcesError
from launchpad_py.errors import StuckNodesError
from launchpad_py.errors import UnknownLaunchTypeError
