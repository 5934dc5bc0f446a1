"""Where node processes' output goes: the terminal modes of ``local_mp``.

- ``current_terminal``: every line in this terminal, prefixed ``[label/index]``
  (coloured when the terminal supports it).
- ``output_to_files``: one log file per node; the paths are printed at start.
- ``tmux_session``: one tmux window per node (see ``launchers/local/processes.py``); output is
  also kept in a log file.
- ``test``: like ``current_terminal`` without colour, written to the current
  ``sys.stdout`` so pytest captures it per test.

Every mode keeps the tail of each node's output for error messages, and none
of them is involved in detecting crashes (the control channel is).
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import threading
from typing import Callable

MODES = ('current_terminal', 'output_to_files', 'tmux_session')
_COLOURS = (31, 32, 33, 34, 35, 36, 91, 92, 93, 94, 95, 96)
TAIL_LINES = 40


def check_mode(terminal: str | None) -> str:
    from launchpad_py import errors
    mode = terminal or 'current_terminal'
    if mode not in MODES:
        raise errors.ProgramError(f'unknown terminal {terminal!r}; choose one of {", ".join(MODES)}')
    return mode


class Sink:
    """Receives one node process's output."""

    def __init__(self, name: str, log_path: str):
        self.name = name
        self.log_path = log_path

    def popen_streams(self) -> dict:
        return {}

    def attach(self, process: subprocess.Popen) -> None:
        """Called once the process has started."""

    def follow(self, stream) -> None:
        """Takes the node's output from ``stream`` (readline/close, e.g. a pod's log), on a thread."""

    def note(self, line: str) -> None:
        """A line from the launcher about the node (why its pod waits), kept with its output."""

    def take_lines(self) -> Callable[[str], None]:
        """For output handed over line by line (a host agent's relay): what takes each line."""
        return self.note

    def tail(self) -> str:
        try:
            with open(self.log_path, 'rb') as log:
                lines = log.read()[-64_000:].decode(errors='replace').splitlines()
        except OSError:
            return '(no output)'
        return '\n'.join(lines[-TAIL_LINES:])

    def close(self) -> None:
        """Called after the process has exited."""


class FileSink(Sink):
    _thread: threading.Thread | None = None

    def popen_streams(self) -> dict:
        self._file = open(self.log_path, 'ab')  # A restarted node's log goes on.
        return {'stdout': self._file, 'stderr': subprocess.STDOUT}

    def follow(self, stream) -> None:
        self._file = open(self.log_path, 'ab')  # After any note() lines.
        self._thread = threading.Thread(target=self._copy, args=(stream,),
                                        name=f'lp-output-{self.name}', daemon=True)
        self._thread.start()

    def _copy(self, stream) -> None:
        for raw in iter(stream.readline, b''):
            self._file.write(raw)
            self._file.flush()
        stream.close()

    def note(self, line: str) -> None:
        with open(self.log_path, 'ab') as log:
            log.write(f'{line}\n'.encode())

    def take_lines(self) -> Callable[[str], None]:
        self._file = open(self.log_path, 'ab')
        return self._write_line

    def _write_line(self, line: str) -> None:
        self._file.write(f'{line}\n'.encode())
        self._file.flush()

    def close(self) -> None:
        if self._thread is not None:
            self._thread.join(5)
        if hasattr(self, '_file'):
            self._file.close()


class PrefixSink(Sink):
    """Copies lines to this process's stdout with a prefix, keeping a tail (and a log file)."""

    def __init__(self, name: str, log_path: str, colour: bool, keep_log: bool = False):
        super().__init__(name, log_path)
        self._lines: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._thread: threading.Thread | None = None
        self._log = open(log_path, 'w') if keep_log else None
        code = _COLOURS[sum(map(ord, name.split('/')[0])) % len(_COLOURS)]
        self._prefix = f'\033[{code}m[{name}]\033[0m ' if colour else f'[{name}] '

    def popen_streams(self) -> dict:
        return {'stdout': subprocess.PIPE, 'stderr': subprocess.STDOUT}

    def attach(self, process: subprocess.Popen) -> None:
        self.follow(process.stdout)

    def follow(self, stream) -> None:
        self._thread = threading.Thread(target=self._copy, args=(stream,),
                                        name=f'lp-output-{self.name}', daemon=True)
        self._thread.start()

    def _copy(self, stream) -> None:
        for raw in iter(stream.readline, b''):
            self.note(raw.decode(errors='replace').rstrip('\n'))
        stream.close()

    def note(self, line: str) -> None:
        self._lines.append(line)
        if self._log is not None:
            self._log.write(line + '\n')
            self._log.flush()
        try:
            sys.stdout.write(f'{self._prefix}{line}\n')
            sys.stdout.flush()
        except (OSError, ValueError):  # Our stdout closed: keep the tail anyway.
            pass

    def tail(self) -> str:
        return '\n'.join(self._lines) or '(no output)'

    def close(self) -> None:
        if self._thread is not None:
            self._thread.join(5)
        if self._log is not None and (self._thread is None or not self._thread.is_alive()):
            self._log.close()


def make_sink(mode: str, name: str, log_dir: str, test: bool, keep_log: bool = False) -> Sink:
    """``keep_log``: lines shown in the terminal also go to the node's file in ``log_dir``."""
    log_path = os.path.join(log_dir, name.replace('/', '_') + '.log')
    if test:
        return PrefixSink(name, log_path, colour=False, keep_log=keep_log)
    if mode == 'current_terminal':
        return PrefixSink(name, log_path, colour=sys.stdout.isatty(), keep_log=keep_log)
    if mode == 'output_to_files':
        return FileSink(name, log_path)
    return Sink(name, log_path)  # tmux: the window tees into log_path.
