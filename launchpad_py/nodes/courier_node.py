"""``CourierNode``: builds a user object, serves its public methods, calls ``run()``.

    learner = p.add_node(lp.CourierNode(Learner, replay, lr=1e-3))
    actor = lp.CourierNode(Actor, learner)   # the handle becomes a client of Learner
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Generic, Iterator, TypeVar

from launchpad_py import courier, runtime
from launchpad_py.nodes.deferred_call import DeferredCall, target_name
from launchpad_py.program.address import Address, get_port_from_address
from launchpad_py.program.handle import Handle
from launchpad_py.program.node import ExecutionContext, Executable, Node

T = TypeVar('T')
CourierClient = courier.Client


class CourierHandle(Handle[T], Generic[T]):
    """Dereferences to a ``courier.Client`` of the node's server."""

    def __init__(self, address: Address, client_kwargs: dict | None = None):
        self._address = address
        self._client_kwargs = dict(client_kwargs or {})

    @property
    def address(self) -> Address:
        return self._address

    def dereference(self) -> T:
        return courier.Client(self._address.resolve(), **self._client_kwargs)  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f'CourierHandle({self._address!r})'


@dataclasses.dataclass
class _ServeObject:
    """The executable body of a courier node (picklable)."""

    call: DeferredCall
    address: Address
    run_enabled: bool
    server_kwargs: dict

    def __call__(self, context: ExecutionContext) -> None:
        obj = self.call()
        server = courier.Server(obj, get_port_from_address(self.address.resolve()),
                                host=context.bind_host, label=context.label,
                                thread_initializer=runtime.inherit_binding(), **self.server_kwargs)
        server.start()
        try:
            context.report_ready()
            run = getattr(obj, 'run', None)
            if self.run_enabled and callable(run):
                run()
            else:
                context.stop_event.wait()
        finally:
            server.stop()


class CourierNode(Node, Generic[T]):
    """Serves ``constructor(*args, **kwargs)`` over courier.

    Options are keyword-only and prefixed so they never collide with the
    constructor's own arguments: ``courier_kwargs`` go to the server (e.g.
    ``{'thread_pool_size': 32}``), ``courier_client_kwargs`` to every client
    made from this node's handles (e.g. ``{'timeout': 5}``).
    """

    def __init__(self, constructor: Callable[..., T], *args,
                 courier_kwargs: dict | None = None,
                 courier_client_kwargs: dict | None = None, **kwargs):
        super().__init__()
        self._call = DeferredCall(constructor, args, kwargs)
        self._server_kwargs = dict(courier_kwargs or {})
        self._client_kwargs = dict(courier_client_kwargs or {})
        self._address = self._new_address()

    def configure(self, *args, **kwargs) -> None:
        """Sets the constructor's arguments after creation (for cyclic topologies)."""
        self._call = DeferredCall(self._call.target, args, kwargs)

    def _target_name(self) -> str:
        return target_name(self._call.target)

    def arguments(self) -> Iterator[tuple[str, Any]]:
        return self._call.arguments()

    def create_handle(self) -> CourierHandle[T]:
        return CourierHandle(self._address, self._client_kwargs)

    def to_executables(self) -> list[Executable]:
        body = _ServeObject(self._call, self._address, self._run_enabled, self._server_kwargs)
        return [Executable(self.label, self.index, self.description, body, [self._address])]
