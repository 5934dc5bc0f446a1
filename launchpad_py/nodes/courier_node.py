"""``CourierNode``: builds a user object, serves its public methods, calls ``run()``.

    learner = p.add_node(lp.CourierNode(Learner, replay, lr=1e-3), label='learner')
    actor = lp.CourierNode(Actor, learner)   # the handle becomes a client of Learner
"""

from __future__ import annotations

import dataclasses
import inspect
import threading
from typing import Any, Callable, Generic, Iterator, TypeVar

from launchpad_py import courier, errors
from launchpad_py.node_side import checkpoints, runtime
from launchpad_py.nodes.deferred_call import DeferredCall, target_name
from launchpad_py.program.address import Address
from launchpad_py.program.handle import Handle
from launchpad_py.program.node import ExecutionContext, Executable, Node

T = TypeVar('T')
CourierClient = courier.Client


class CourierHandle(Handle[T], Generic[T]):
    """Dereferences to a ``courier.Client`` of the node's server."""

    def __init__(self, address: Address, **client_kwargs):
        self._address = address
        self._client_kwargs = client_kwargs

    def set_client_kwargs(self, **client_kwargs) -> None:
        """Options for the clients this handle makes, e.g. ``call_timeout=5``."""
        self._client_kwargs = client_kwargs

    @property
    def address(self) -> Address:
        return self._address

    def dereference(self) -> T:
        return courier.Client(self._address.resolve(), server_identity=self._address.identity,
                              relocate=self._address.relocate,
                              **self._client_kwargs)  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f'CourierHandle({self._address!r})'


class _UnderConstruction:
    """Stands in for the node's object while its constructor runs.

    The server listens (and the node reports ready) before construction, so a
    slow or blocking constructor does not hold up the launch; calls that arrive
    meanwhile wait for the object.
    """

    def __init__(self, label: str):
        self._label = label
        self._done = threading.Event()
        self._obj: Any = None
        self._error: BaseException | None = None

    def finish(self, obj: Any = None, error: BaseException | None = None) -> None:
        self._obj, self._error = obj, error
        self._done.set()

    def _target(self) -> Any:
        if not self._done.is_set():  # Every call comes here: once built, no lock per call.
            self._done.wait()
        if self._error is not None:
            raise errors.PeerFailedError(f'the object of node {self._label!r} failed to construct: '
                                         f'{type(self._error).__name__}: {self._error}')
        return self._obj

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target(), name)

    def __dir__(self) -> list[str]:
        return dir(self._target())

    @property  # type: ignore[misc]
    def __class__(self):  # Errors name the user's class: the server reads obj.__class__.
        return type(self._target())

    def __call__(self, *args, **kwargs) -> Any:
        return self._target()(*args, **kwargs)


@dataclasses.dataclass
class _ServeObject:
    """The executable body of a courier node (picklable)."""

    call: DeferredCall
    address: Address
    run_enabled: bool
    server_kwargs: dict

    def __call__(self, context: ExecutionContext) -> None:
        stand_in = _UnderConstruction(context.label)
        server = start_server(stand_in, self.address, context, self.server_kwargs)
        try:
            context.report_ready()
            try:
                obj = self.call()
            except BaseException as exc:
                stand_in.finish(error=exc)
                raise
            # The server first, so that once a waiting call is answered every later call
            # resolves on the object itself, not through the stand-in.
            server.replace_object(obj)
            stand_in.finish(obj)
            checkpoints.register_object(obj)
            run = getattr(obj, 'run', None)
            if self.run_enabled and callable(run):
                run()
            else:
                context.stop_event.wait()
        finally:
            server.stop()


def start_server(obj: Any, address: Address, context: ExecutionContext,
                 server_kwargs: dict) -> courier.Server:
    """Serves ``obj`` where ``address`` says (port 0 unless fixed) and records where it listens.

    The program's secret is passed by hand: a server on port 0 cannot be found
    by its address in the launching process's registry (``local_mt``).
    """
    kwargs = {'secret': runtime.current_scope().secret, **server_kwargs}

    def serve(port: int) -> courier.Server:
        return courier.Server(obj, port, host=context.bind_host,
                              label=f'{context.label}/{context.index}',
                              thread_initializer=runtime.inherit_binding(),
                              identity=address.identity, **kwargs).start()

    port = address.port_to_bind()
    try:
        server = serve(port)
    except courier.CourierError:
        if not port or address.is_assigned:
            raise
        # A restart's old port, taken meanwhile: serve elsewhere, clients find it again.
        server = serve(0)
    address.bound(server.address)
    return server


def _checked_client_kwargs(kwargs: dict | None, constructor: Callable) -> dict:
    """Rejects options ``courier.Client`` does not take now rather than at the first call."""
    kwargs = dict(kwargs or {})
    try:
        inspect.signature(courier.Client).bind('host:0', **kwargs)
    except TypeError as exc:
        raise errors.ProgramError(
            f'courier_client_kwargs={kwargs!r} of CourierNode({target_name(constructor)}) do not '
            f'fit courier.Client(server_address, compress, call_timeout, wait_for_ready, *, '
            f'timeout, transport, device_arrays, max_message_bytes): {exc}') from None
    return kwargs


class CourierNode(Node, Generic[T]):
    """Serves ``constructor(*args, **kwargs)`` over courier.

    Options are keyword-only and prefixed so they never collide with the
    constructor's own arguments: ``courier_kwargs`` go to the server (e.g.
    ``{'thread_pool_size': 32}``), ``courier_client_kwargs`` to every client
    made from this node's handles: ``courier.Client``'s own parameters, e.g.
    ``{'call_timeout': 5, 'wait_for_ready': False}``.
    """

    def __init__(self, constructor: Callable[..., T], *args,
                 courier_kwargs: dict | None = None,
                 courier_client_kwargs: dict | None = None, **kwargs):
        super().__init__()
        self._call = DeferredCall(constructor, args, kwargs)
        self._server_kwargs = dict(courier_kwargs or {})
        self._client_kwargs = _checked_client_kwargs(courier_client_kwargs, constructor)
        self._address = self._new_address()

    def configure(self, *args, **kwargs) -> None:
        """Sets the constructor's arguments after creation (for cyclic topologies)."""
        self._call = DeferredCall(self._call.target, args, kwargs)

    def _target_name(self) -> str:
        return target_name(self._call.target)

    def arguments(self) -> Iterator[tuple[str, Any]]:
        return self._call.arguments()

    @property
    def courier_address(self) -> Address:
        return self._address

    def create_handle(self) -> CourierHandle[T]:
        return CourierHandle(self._address, **self._client_kwargs)

    def to_executables(self) -> list[Executable]:
        body = _ServeObject(self._call, self._address, self._run_enabled, self._server_kwargs)
        return [Executable(self.label, self.index, self.description, body, [self._address])]
