"""Nodes that ignore a stop and cannot be killed, because they are threads.

A thread cannot be ended from outside. When a ``local_mt`` node (or a stop
handler) ignores a stop for the grace period, the launching process ends
itself, as a process launcher kills a stuck node's process: it prints each
stuck node with its Python stack and exits with status 137, as DeepMind
Launchpad does. Ending the process under ``test_mt`` would kill the test
runner, so there ``stop()`` and ``wait()`` raise ``StuckNodesError`` with
the same report instead, and the threads are left running as daemon threads.
"""

from __future__ import annotations

import os
import sys
import threading
import traceback
from typing import NoReturn

from launchpad_py import errors

#: The launching process's exit status when it ends itself (128 + SIGKILL).
EXIT_STATUS = 137


def thread_stack(thread: threading.Thread, frames: dict | None = None) -> str:
    """Where ``thread`` is now, as a Python stack; ``frames``: one ``sys._current_frames()``
    taken for many threads (taking it per thread was O(threads) each: 2,000 stuck nodes of a
    loaded machine took minutes to report)."""
    frame = (sys._current_frames() if frames is None else frames).get(thread.ident)
    if frame is None:
        return '(the thread has just ended)\n'
    frames = traceback.extract_stack(frame)
    while len(frames) > 1 and frames[0].filename == threading.__file__:
        frames.pop(0)  # The thread machinery says nothing about the node.
    return ''.join(traceback.format_list(frames))


def report(program: str, grace: float, stacks: dict[str, str]) -> str:
    """Names the stuck nodes and shows where each one is."""
    text = (f'program {program!r}: {", ".join(stacks)} did not end within the {grace:g}s grace '
            'period after the stop')
    for name, stack in stacks.items():
        text += f'\n--- Python stack of {name} ---\n{stack.rstrip()}'
    return text


def end_process(text: str) -> NoReturn:
    """Prints ``text`` and ends the process at once (threads left behind cannot stop it)."""
    sys.stderr.write(f'launchpad_py: {text}\nlaunchpad_py: threads cannot be killed, so the '
                     f'launching process exits now with status {EXIT_STATUS}\n')
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(EXIT_STATUS)


def error(program: str, grace: float, stacks: dict[str, str]) -> errors.StuckNodesError:
    return errors.StuckNodesError(list(stacks), report(program, grace, stacks) +
                                  '\n(their threads are left running)')
