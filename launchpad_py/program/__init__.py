"""The program graph: ``Program``, nodes, handles and address placeholders.

Also the failure policies as the user declares them (``failure_policy``: ``lp.Restart``,
``lp.StopProgram``) and the graph's structure for pictures (``graph``).

May import: ``courier`` (serialization) and the package root's ``errors``. Never a node
type, the node side, supervision or a launcher: the graph only knows the ``Node`` and
``Handle`` interfaces.
"""

from launchpad_py.program.address import AbstractAddressBuilder
from launchpad_py.program.address import Address
from launchpad_py.program.address import SimpleLocalAddressBuilder
from launchpad_py.program.address import get_port_from_address
from launchpad_py.program.deferred import Deferred
from launchpad_py.program.deferred import maybe_dereference
from launchpad_py.program.group_handle import GroupHandle
from launchpad_py.program.group_handle import GroupMembers
from launchpad_py.program.handle import Handle
from launchpad_py.program.handle import dereference_all
from launchpad_py.program.handle import find_handles
from launchpad_py.program.node import ExecutionContext
from launchpad_py.program.node import Executable
from launchpad_py.program.node import Node
from launchpad_py.program.program import Program
