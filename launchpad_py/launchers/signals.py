"""Ctrl-C in the launching process stops its programs gracefully; a second one kills them."""

from __future__ import annotations

import logging
import signal
import threading
import weakref

from launchpad_py.supervision import controller

_log = logging.getLogger(__name__)
_installed = False
_interrupted: weakref.WeakSet = weakref.WeakSet()  # Programs a Ctrl-C already asked to stop.


def _on_sigint(signum, frame) -> None:
    running = controller.running_programs()
    if not running:
        raise KeyboardInterrupt
    for program in running:
        if program in _interrupted or program.is_stopping:
            program.request_stop(grace=0)  # Second Ctrl-C: no more grace.
        else:
            _interrupted.add(program)
            _log.warning('Ctrl-C: stopping program %r (press again to kill it)', program.name)
            program.request_stop()


def install_once() -> None:
    """Installs the SIGINT handler, or says why it cannot (not the main thread)."""
    global _installed
    if _installed:
        return
    if threading.current_thread() is not threading.main_thread():
        _log.info('lp.launch() runs outside the main thread, so Ctrl-C cannot be handled '
                  'here; stop the program with its controller.stop() or lp.stop()')
        return
    signal.signal(signal.SIGINT, _on_sigint)
    _installed = True
