"""The node interface that programs and launchers rely on.

A node *describes* what to run. ``to_executables`` turns it into
launcher-neutral ``Executable`` objects; launchers decide where and how to
run them and never look at the node's class.
"""

from __future__ import annotations

import abc
import dataclasses
import threading
from typing import Any, Callable, Iterator

from launchpad_py.program.address import Address
from launchpad_py.program.handle import Handle, find_handles


@dataclasses.dataclass
class ExecutionContext:
    """What a running executable may ask of its launcher."""

    label: str
    index: int
    bind_host: str
    report_ready: Callable[[], None]
    stop_event: threading.Event


@dataclasses.dataclass
class Executable:
    """One unit a launcher runs: ``main(context)`` must be picklable."""

    label: str
    index: int
    description: str
    main: Callable[[ExecutionContext], None]
    addresses: list[Address]


class Node(abc.ABC):
    """Base of all node types."""

    def __init__(self) -> None:
        self.label: str | None = None
        self.index: int | None = None
        self._run_enabled = True
        self._addresses: list[Address] = []

    def _new_address(self, name: str = 'default') -> Address:
        address = Address(name)
        address.owner = self.description
        self._addresses.append(address)
        return address

    @property
    def addresses(self) -> list[Address]:
        return list(self._addresses)

    def disable_run(self) -> None:
        """Build (and serve) the node's object but do not call its ``run()``."""
        self._run_enabled = False

    @property
    def description(self) -> str:
        """``Type(target)`` plus the label once known, for messages."""
        text = f'{type(self).__name__}({self._target_name()})'
        return f'{text} labelled {self.label!r}' if self.label else text

    def _on_added(self, label: str, index: int) -> None:
        self.label, self.index = label, index
        for address in self._addresses:
            address.owner = f'node {label!r} ({self.description})'
        self._name_addresses(f'{label}/{index}')

    def _name_addresses(self, prefix: str) -> None:
        """Gives each address the identity its server proves: ``prefix`` (plus the address's
        name when the node has several)."""
        for address in self._addresses:
            address.identity = prefix if address.name == 'default' else f'{prefix}/{address.name}'

    def arguments(self) -> Iterator[tuple[str, Any]]:
        """(name, value) of each user argument, for edges and error messages."""
        return iter(())

    def input_handles(self) -> list[Handle]:
        """Handles among the arguments: the node's incoming edges."""
        return [h for _, value in self.arguments() for h in find_handles(value)]

    @abc.abstractmethod
    def _target_name(self) -> str:
        """Name of what the node runs, e.g. the class or function name."""

    @abc.abstractmethod
    def create_handle(self) -> Handle:
        """A handle to this node; valid before ``add_node`` too."""

    @abc.abstractmethod
    def to_executables(self) -> list[Executable]:
        """What to run for this node; called by launchers after addresses are assigned."""
