"""A submitted program's output: the controller's log, each node's lines prefixed ``[label/i]``.

    for line in select(text.splitlines(True), node='learner', grep='loss', since=t): ...
    for line in follow_file(path, ended): ...   # tail -F, until ``ended()`` and read to the end

``node`` is a label (every node of the group) or ``label/index`` (one node);
``since`` drops lines older than that epoch time (see ``stamps``: lines
written without a time count as written with the line before them).
"""

from __future__ import annotations

import re
import threading
from typing import Callable, Iterable, Iterator

from launchpad_py.submission import stamps

_PAUSE_S = 0.5


def select(lines: Iterable[str], node: str | None = None, grep: str | None = None,
           since: float | None = None, times: bool = False) -> Iterator[str]:
    """The lines of ``node`` (a label, or label/index) that match the regular expression
    ``grep``, written at ``since`` or later; with their times when ``times``."""
    prefix = None if node is None else f'[{node}]' if '/' in node else f'[{node}/'
    pattern = re.compile(grep) if grep else None
    when = None
    for line in lines:
        when, text = _time_of(line, when)
        if since is not None and (when is None or when < since):
            continue
        if prefix is not None and not text.startswith(prefix):
            continue
        if pattern is not None and not pattern.search(text):
            continue
        yield line if times else text


def _time_of(line: str, before: float | None) -> tuple[float | None, str]:
    when, text = stamps.split(line)
    return (before if when is None else when), text


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
