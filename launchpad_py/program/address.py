"""Address placeholders: where a node's server will listen, filled in at launch.

A node creates its ``Address`` when it is made; handles to the node hold the
same object. Launchers assign real ``host:port`` values before nodes run
(loopback ports locally; later a host's address or a DNS name), so a handle
shipped to another process carries its peer's address with it.
"""

from __future__ import annotations

import abc

import portpicker

from launchpad_py import errors


class AbstractAddressBuilder(abc.ABC):
    """Produces the ``host:port`` an address is bound to."""

    @abc.abstractmethod
    def build(self) -> str:
        """Returns a concrete address."""


class SimpleLocalAddressBuilder(AbstractAddressBuilder):
    """A free loopback port of this machine."""

    def build(self) -> str:
        return f'127.0.0.1:{portpicker.pick_unused_port()}'


class Address:
    """A placeholder for a server address, resolved only in a running program."""

    def __init__(self, name: str = 'default'):
        self.name = name
        self.owner = 'a node'  # Set by the node, for error messages.
        # The name its server proves and its clients expect ('label/index'), set when the
        # node joins a program: a proof made for one node is worthless at another.
        self.identity: str | None = None
        self._value: str | None = None

    def assign(self, value: str) -> None:
        if not isinstance(value, str) or ':' not in value:
            raise errors.ProgramError(f"address of {self.owner} must be 'host:port' (got {value!r})")
        self._value = value

    def bind(self, builder: AbstractAddressBuilder) -> None:
        self.assign(builder.build())

    def unbind(self) -> None:
        self._value = None

    @property
    def is_assigned(self) -> bool:
        return self._value is not None

    def resolve(self) -> str:
        if self._value is None:
            raise errors.NotRunningError(
                f'the address of {self.owner} is not assigned: handles can only be dereferenced '
                'inside a running program; launch it with lp.launch(program) and use the handle '
                'inside a node')
        return self._value

    def __repr__(self) -> str:
        return f'Address({self.owner}, {self._value or "unassigned"})'


def get_port_from_address(address: str) -> int:
    """The port of ``'host:port'`` (IPv6 ``'[::1]:port'`` too)."""
    host, sep, port = address.rpartition(':')
    if not sep or not port.isdigit():
        raise ValueError(f"expected an address 'host:port' (got {address!r})")
    return int(port)
