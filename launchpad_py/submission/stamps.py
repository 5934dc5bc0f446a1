"""Times on the controller's log lines, so that ``logs --since`` can pick the recent ones.

The controller of a submitted program writes through ``Stamped``, which puts
the UTC time in front of each line as it starts (node lines are written by the
controller too, prefixed ``[label/index]``)::

    2026-11-26T06:47:01.123Z [learner/0] loss 0.25

``split`` takes a stored line apart again; ``parse_since`` reads what a user
passes to ``--since``: a duration back from now (``90s``, ``10m``, ``2h``,
``1d``) or a UTC time (``2026-11-26T06:40``, seconds optional).
"""

from __future__ import annotations

import datetime
import io
import re
import threading
import time

_STAMP = re.compile(r'(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z ')
_DURATION = re.compile(r'(\d+(?:\.\d+)?)([smhd])$')
_UNIT_S = {'s': 1, 'm': 60, 'h': 3600, 'd': 86400}


def stamp(when: float) -> str:
    whole = time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(when))
    return f'{whole}.{int(when % 1 * 1000):03d}Z '


class Stamped(io.TextIOBase):
    """A text stream that writes to ``out`` with the time before every line."""

    def __init__(self, out):
        self._out = out
        self._lock = threading.Lock()
        self._line_start = True

    def write(self, text: str) -> int:
        with self._lock:
            for piece in text.splitlines(True):
                if self._line_start:
                    self._out.write(stamp(time.time()))
                self._out.write(piece)
                self._line_start = piece.endswith('\n')
            self._out.flush()
        return len(text)

    def flush(self) -> None:
        self._out.flush()

    def fileno(self) -> int:
        return self._out.fileno()


def split(line: str) -> tuple[float | None, str]:
    """(epoch seconds, the line without its time); None for a line written without one."""
    found = _STAMP.match(line)
    if found is None:
        return None, line
    then = datetime.datetime.strptime(found.group(1), '%Y-%m-%dT%H:%M:%S.%f')
    return then.replace(tzinfo=datetime.timezone.utc).timestamp(), line[found.end():]


def parse_since(text: str, now: float | None = None) -> float:
    """Epoch seconds of ``--since``; ValueError, saying what is accepted, for anything else."""
    duration = _DURATION.match(text.strip())
    if duration:
        return (time.time() if now is None else now) - float(duration.group(1)) * _UNIT_S[
            duration.group(2)]
    for form in ('%Y-%m-%dT%H:%M:%S', '%Y-%m-%dT%H:%M', '%Y-%m-%d %H:%M:%S', '%Y-%m-%d %H:%M'):
        try:
            then = datetime.datetime.strptime(text.strip(), form)
        except ValueError:
            continue
        return then.replace(tzinfo=datetime.timezone.utc).timestamp()
    raise ValueError(f'--since takes a duration such as 90s, 10m, 2h or 1d, or a UTC time such as '
                     f'2026-11-26T06:40 (got {text!r})')
