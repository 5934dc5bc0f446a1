"""A node logs as the launching script does: absl's format, level and log files.

Node code reports progress with ``absl.logging``. In the launching script,
``app.run`` installs absl's handler (its format, the ``--verbosity`` level,
``--logtostderr``); a node process would otherwise fall back to Python's
defaults, where ``logging.info`` prints nothing. So the launcher captures
how its process logs (``capture``) and every node process repeats it
(``configure``) once the launcher's flags are restored there.

Lines are labelled like the rest of a node's output, ``[label/index]``:
node processes whose output a launcher already labels need nothing more;
threads sharing one process (``local_mt``) and processes writing straight to
the launcher's terminal get the label from ``label_lines``.

With ``--log_dir`` (and without ``--logtostderr``) a node process writes its
absl log to a file of its own there, named after the node, as absl does for
an application; ``--alsologtostderr`` and ``--stderrthreshold`` say what
still reaches the terminal.
"""

from __future__ import annotations

import logging
import sys
from typing import Callable

from absl import flags
from absl import logging as absl_logging

from launchpad_py.node_side import runtime

FLAGS = flags.FLAGS


def capture() -> dict:
    """How this process logs: whether absl's handler is installed, and the levels."""
    return {'absl_handler': absl_logging.get_absl_handler() in logging.root.handlers,
            'root_level': logging.root.level,
            'absl_level': logging.getLogger('absl').level}


def configure(setup: dict | None, name: str, label_lines_here: bool = False) -> None:
    """Makes this node process log as the process that captured ``setup`` does.

    ``name`` (``label/index``) names the node's log file and, with
    ``label_lines_here``, starts every line.
    """
    if setup is None:
        return
    if setup['absl_handler']:
        absl_logging.use_absl_handler()
        if _flag('log_dir') and not _flag('logtostderr'):
            absl_logging.get_absl_handler().use_absl_log_file(
                program_name=name.replace('/', '.'), log_dir=_flag('log_dir'))
    logging.root.setLevel(setup['root_level'])
    logging.getLogger('absl').setLevel(setup['absl_level'])
    if label_lines_here:
        label_lines(lambda: name)


def configure_launcher() -> None:
    """For node threads of this process (``local_mt``): ``--log_dir`` and labelled lines.

    The threads log through this process's own handlers, so format and level
    are the script's already.
    """
    handler = absl_logging.get_absl_handler()
    if (handler in logging.root.handlers and _flag('log_dir') and not _flag('logtostderr')
            and getattr(handler.python_handler, 'stream', None) is sys.stderr):
        handler.use_absl_log_file(log_dir=_flag('log_dir'))
    label_lines(_thread_node_name)


def label_lines(name_of: Callable[[], str | None]) -> None:
    """Starts each line of every root handler's records with ``[name] ``.

    ``name_of`` is asked in the logging thread; None leaves the record as it
    is. With no handler yet, Python's basic one is installed first (absl
    would install it at its first record anyway).
    """
    if not logging.root.handlers:
        logging.basicConfig()
    for handler in logging.root.handlers:
        inner = _formatter(handler)
        if not isinstance(inner, _Labelled):
            handler.setFormatter(_Labelled(inner, name_of))


class _Labelled(logging.Formatter):
    """Wraps a handler's formatter and labels each line it makes."""

    def __init__(self, inner: logging.Formatter | None, name_of: Callable[[], str | None]):
        super().__init__()
        self._inner = inner or logging.Formatter()
        self._name_of = name_of

    def format(self, record: logging.LogRecord) -> str:
        text = self._inner.format(record)
        name = self._name_of()
        if name is None:
            return text
        return '\n'.join(f'[{name}] {line}' for line in text.split('\n'))


def _formatter(handler: logging.Handler) -> logging.Formatter | None:
    if isinstance(handler, absl_logging.ABSLHandler):
        return handler.python_handler.formatter
    return handler.formatter


def _thread_node_name() -> str | None:
    node = runtime.thread_node()
    return None if node is None else f'{node.label}/{node.index}'


def _flag(name: str):
    return FLAGS[name].value if name in FLAGS and FLAGS.is_parsed() else None

