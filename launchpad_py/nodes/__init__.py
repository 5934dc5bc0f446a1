"""Node types: one module each, holding the node, its handle and its executable."""

from launchpad_py.nodes.courier_node import CourierClient
from launchpad_py.nodes.courier_node import CourierHandle
from launchpad_py.nodes.courier_node import CourierNode
from launchpad_py.nodes.python_node import PyClassNode
from launchpad_py.nodes.python_node import PyNode
