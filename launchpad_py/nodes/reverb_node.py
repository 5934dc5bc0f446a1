"""``ReverbNode``: a dm-reverb replay server; its handle dereferences to a ``reverb.Client``.

    def make_tables():
        return [reverb.Table.queue('replay', max_size=10_000)]

    replay = p.add_node(lp.ReverbNode(make_tables), label='replay')

dm-reverb and TensorFlow are optional: this module imports them only when a
reverb node runs or a handle is dereferenced, and their absence is reported
with the install line.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import tempfile
from typing import Any, Callable, Iterator

from launchpad_py.nodes.deferred_call import target_name
from launchpad_py.program.address import Address
from launchpad_py.program.handle import Handle
from launchpad_py.program.node import ExecutionContext, Executable, Node

INSTALL_LINE = "pip install 'launchpad_py[reverb]'"


def _missing_reverb() -> ModuleNotFoundError:
    return ModuleNotFoundError(
        'lp.ReverbNode needs dm-reverb and TensorFlow, which are not installed here; '
        f'install them with: {INSTALL_LINE}  (dm-reverb 0.14.0 needs Python 3.11, '
        'tensorflow-cpu 2.15.1 and numpy<2)', name='reverb')


def import_reverb():
    """The ``reverb`` module, or an error carrying the install line."""
    try:
        import reverb
    except ModuleNotFoundError as exc:
        if exc.name not in ('reverb', 'tensorflow'):
            raise
        raise _missing_reverb() from exc
    return reverb


class ReverbHandle(Handle[Any]):
    """Dereferences to a ``reverb.Client`` of the node's server."""

    def __init__(self, address: Address):
        self._address = address

    @property
    def address(self) -> Address:
        return self._address

    def dereference(self):
        return import_reverb().Client(self._address.resolve())

    def __repr__(self) -> str:
        return f'ReverbHandle({self._address!r})'


@dataclasses.dataclass
class _ServeReverb:
    """The executable body of a reverb node (picklable)."""

    priority_tables_fn: Callable[[], list]
    checkpoint_ctor: Callable[[], Any] | None
    checkpoint_interval_s: float | None
    address: Address

    def __call__(self, context: ExecutionContext) -> None:
        reverb = import_reverb()
        tables = self.priority_tables_fn()
        if not isinstance(tables, (list, tuple)) or not tables or not all(
                isinstance(table, reverb.Table) for table in tables):
            raise TypeError(f'priority_tables_fn of ReverbNode {context.label!r} must return a '
                            f'non-empty list of reverb.Table (got {tables!r:.200})')
        with tempfile.TemporaryDirectory(prefix='lp-reverb-') as scratch:
            # Without a checkpointer reverb makes a temporary directory it never removes.
            checkpointer = (self.checkpoint_ctor() if self.checkpoint_ctor else
                            reverb.checkpointers.DefaultCheckpointer(path=scratch))
            # reverb.Server listens on every interface; it has no option to bind one host.
            # Reverb picks a free port itself when given none.
            server = reverb.Server(list(tables), checkpointer=checkpointer,
                                   port=self.address.port_to_bind() or None)
            self.address.bound(f'{context.bind_host}:{server.port}')
            try:
                context.report_ready()
                self._serve(server.localhost_client(), context)
            finally:
                server.stop()

    def _serve(self, client, context: ExecutionContext) -> None:
        """Blocks until the program stops (never in ``Server.wait``, which ignores SIGTERM)."""
        while not context.stop_event.wait(self.checkpoint_interval_s):
            client.checkpoint()
        if self.checkpoint_ctor is not None:
            client.checkpoint()  # The final state survives a restart of the program.


class ReverbNode(Node):
    """Runs a ``reverb.Server`` with the tables ``priority_tables_fn()`` returns.

    ``checkpoint_ctor()`` builds the server's checkpointer (e.g.
    ``functools.partial(reverb.checkpointers.DefaultCheckpointer, path=...)``);
    with one, the server restores from its latest checkpoint on start,
    checkpoints every ``checkpoint_time_delta_minutes`` if given, and once
    more when the program stops.
    """

    def __init__(self, priority_tables_fn: Callable[[], list],
                 checkpoint_ctor: Callable[[], Any] | None = None,
                 checkpoint_time_delta_minutes: float | None = None):
        super().__init__()
        spec = importlib.util.find_spec('reverb')
        if spec is None or spec.origin is None:  # Missing, or a stray folder named reverb.
            raise _missing_reverb()
        if not callable(priority_tables_fn):
            raise TypeError('ReverbNode priority_tables_fn must be a function returning a list '
                            f'of reverb.Table (got {priority_tables_fn!r})')
        if checkpoint_ctor is not None and not callable(checkpoint_ctor):
            raise TypeError(f'ReverbNode checkpoint_ctor must be callable (got {checkpoint_ctor!r})')
        minutes = checkpoint_time_delta_minutes
        if minutes is not None:
            if isinstance(minutes, bool) or not isinstance(minutes, (int, float)) or minutes <= 0:
                raise ValueError('ReverbNode checkpoint_time_delta_minutes must be a positive '
                                 f'number (got {minutes!r})')
            if checkpoint_ctor is None:
                raise ValueError('ReverbNode checkpoint_time_delta_minutes needs a checkpoint_ctor '
                                 'to know where to write checkpoints')
        self._tables_fn = priority_tables_fn
        self._checkpoint_ctor = checkpoint_ctor
        self._interval_s = minutes * 60 if minutes is not None else None
        self._address = self._new_address()

    def _target_name(self) -> str:
        return target_name(self._tables_fn)

    def arguments(self) -> Iterator[tuple[str, Any]]:
        yield 'priority_tables_fn', self._tables_fn
        if self._checkpoint_ctor is not None:
            yield 'checkpoint_ctor', self._checkpoint_ctor

    def create_handle(self) -> ReverbHandle:
        return ReverbHandle(self._address)

    def to_executables(self) -> list[Executable]:
        body = _ServeReverb(self._tables_fn, self._checkpoint_ctor, self._interval_s, self._address)
        return [Executable(self.label, self.index, self.description, body, [self._address])]
