"""Preparing a program's executables to be shipped: their pickles.

Addresses are left as they are: local nodes bind and report them (late
binding, see ``address_book``); remote launchers assign them (``assign_addresses``).

An argument that cannot be pickled is reported with the node's label and
the argument's name, instead of a bare pickling traceback.
"""

from __future__ import annotations

from launchpad_py import errors
from launchpad_py.courier import serialization
from launchpad_py.program import AbstractAddressBuilder, Executable, Node, Program


def assign_addresses(program: Program, builder: AbstractAddressBuilder) -> None:
    """Gives every unassigned address of the program a value from ``builder``."""
    for node in program.get_all_nodes():
        for address in node.addresses:
            if not address.is_assigned:
                address.bind(builder)


def _serialization_error(node: Node, cause: Exception) -> errors.NodeSerializationError:
    for name, value in node.arguments():
        try:
            serialization.dumps(value)
        except Exception as exc:
            return errors.NodeSerializationError(
                f'cannot serialize argument {name!r} of node {node.label!r} ({node.description}): '
                f'{type(value).__name__} {value!r:.80} fails with {type(exc).__name__}: {exc}. '
                'Pass something picklable, or create it inside the node (e.g. in its constructor).')
    return errors.NodeSerializationError(
        f'cannot serialize node {node.label!r} ({node.description}): {type(cause).__name__}: '
        f'{cause}. Its class or function must be importable or defined at module level.')


def prepare(program: Program, serialize: bool = True) -> list[tuple[Executable, bytes | None]]:
    """Every executable of the program, with its pickle when ``serialize``."""
    if not program.get_all_nodes():
        raise errors.ProgramError(f'program {program.name!r} has no nodes; add some with add_node')
    prepared = []
    for node in program.get_all_nodes():
        for executable in node.to_executables():
            data = None
            if serialize:
                try:
                    data = serialization.dumps(executable)
                except Exception as exc:
                    raise _serialization_error(node, exc) from exc
            prepared.append((executable, data))
    return prepared

