"""``[label/index]`` before each line that node threads print (``local_mt``).

Node processes get their labels from the launcher, which reads their output
line by line. Threads share the launching process's ``sys.stdout`` and
``sys.stderr``, so there a line is labelled as it is written: each node
thread's text is held until its newline, then written whole, under one lock,
so lines of different nodes do not interleave. Lines of other threads (the
script's own, or threads a node started) are held and written whole too, but
unlabelled. A thread's partial line goes out when it flushes.

    labelled_output.install()   # once, by the thread launcher
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Callable

from launchpad_py.node_side import runtime

_lock = threading.Lock()


class _Labelled:
    """A text stream that writes each thread's lines whole, node threads' labelled."""

    def __init__(self, stream: Any, name_of: Callable[[], str | None]):
        self._stream = stream
        self._name_of = name_of
        self._pending = threading.local()

    def write(self, text: str) -> int:
        held = getattr(self._pending, 'text', '') + text
        lines = held.split('\n')
        self._pending.text = lines.pop()
        if lines:
            self._write_whole([line + '\n' for line in lines])
        return len(text)

    def flush(self) -> None:
        # A partial line goes out when its thread flushes (a progress bar), else with its newline.
        pending, self._pending.text = getattr(self._pending, 'text', ''), ''
        if pending:
            self._write_whole([pending])
        self._stream.flush()

    def _write_whole(self, pieces: list[str]) -> None:
        name = self._name_of()
        if name is not None:
            prefix = f'[{name}] '  # Log records arrive labelled already (node_logging).
            pieces = [p if p.startswith(prefix) else prefix + p for p in pieces]
        with _lock:
            self._stream.write(''.join(pieces))

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding, buffer...
        return getattr(self._stream, name)


def _node_name() -> str | None:
    node = runtime.thread_node()
    return None if node is None else f'{node.label}/{node.index}'


def install() -> None:
    """Labels node threads' lines on ``sys.stdout`` and ``sys.stderr`` (idempotent)."""
    for name in ('stdout', 'stderr'):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, _Labelled):
            setattr(sys, name, _Labelled(stream, _node_name))
