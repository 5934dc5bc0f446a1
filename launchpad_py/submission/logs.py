"""A submitted program's output: the controller's log, each node's lines prefixed ``[label/i]``.

    for line in select(text.splitlines(True), node='learner', grep='loss'): ...
    for line in follow_file(path, ended): ...   # tail -F, until ``ended()`` and read to the end

``node`` is a label (every node of the group) or ``label/index`` (one node).
"""

from __future__ import annotations

import re
import threading
from typing import Callable, Iterable, Iterator

_PAUSE_S = 0.5


def select(lines: Iterable[str], node: str | None = None,
           grep: str | None = None) -> Iterator[str]:
    """The lines of ``node`` (a label, or label/index) that match the regular expression ``grep``."""
    prefix = None if node is None else f'[{node}]' if '/' in node else f'[{node}/'
    pattern = re.compile(grep) if grep else None
    for line in lines:
        if prefix is not None and not line.startswith(prefix):
            continue
        if pattern is not None and not pattern.search(line):
            continue
        yield line


def follow_file(path: str, ended: Callable[[], bool]) -> Iterator[str]:
    """The file's lines, then those appended to it, until ``ended()`` and nothing more is left."""
    pause = threading.Event()
    position, partial = 0, ''
    while True:
        done = ended()  # Asked before reading: what was written before the end is read.
        try:
            with open(path) as source:
                source.seek(position)
                chunk = source.read()
                position = source.tell()
        except FileNotFoundError:
            chunk = ''
        lines = (partial + chunk).splitlines(True)
        partial = lines.pop() if lines and not lines[-1].endswith('\n') else ''
        yield from lines
        if done:
            if partial:
                yield partial
            return
        pause.wait(_PAUSE_S)
