"""Node types: one module each, holding the node, its handle and its executable.

May import: ``courier``, ``program``, ``node_side`` (the running node's context and stop)
and the package root. Never ``supervision`` or ``launchers``: a node describes what to
run and never asks which launcher runs it.
"""

from launchpad_py.nodes.cacher import CacherHandle
from launchpad_py.nodes.cacher import CacherNode
from launchpad_py.nodes.colocation import ColocationHandle
from launchpad_py.nodes.colocation import ColocationNode
from launchpad_py.nodes.colocation import MultiProcessingColocation
from launchpad_py.nodes.colocation import MultiThreadingColocation
from launchpad_py.nodes.courier_node import CourierClient
from launchpad_py.nodes.courier_node import CourierHandle
from launchpad_py.nodes.courier_node import CourierNode
from launchpad_py.nodes.python_node import PyClassNode
from launchpad_py.nodes.python_node import PyNode
from launchpad_py.nodes.reverb_node import ReverbHandle
from launchpad_py.nodes.reverb_node import ReverbNode
