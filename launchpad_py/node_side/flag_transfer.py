"""Carries the launching script's parsed absl flags and logging setup into node processes.

Node code is pickled, and flags defined in the launching script's
``__main__`` would not exist in a node process. So the launcher sends each
flag's definition and value; the node process defines what is missing and
sets every value, before any node code runs. How the launcher logs travels
along (see ``node_logging``), since absl's logging is configured by flags.
Used by launchers for their node processes and by a
``MultiProcessingColocation`` for its children.
"""

from __future__ import annotations

from absl import flags

from launchpad_py.node_side.reporting import node_logging
from launchpad_py.courier import serialization

FLAGS = flags.FLAGS


def capture() -> bytes:
    """This process's flags (None when it never parsed any) and logging setup."""
    return serialization.dumps({'flags': _capture_flags(), 'logging': node_logging.capture()})


def _capture_flags() -> bytes | None:
    if not FLAGS.is_parsed():
        return None
    entries = []
    for name, flag in FLAGS._flags().items():  # Includes short names; keep long ones.
        if name != flag.name:
            continue
        state = {k: v for k, v in vars(flag).items() if k != 'validators'}
        try:
            entries.append((name, serialization.dumps((type(flag), state))))
        except Exception:  # A flag whose parser cannot travel keeps its default there.
            continue
    return serialization.dumps(entries)


def restore(data: bytes | None, extra_args: list[str]) -> dict | None:
    """Defines and sets the captured flags here, then applies ``extra_args``.

    Returns the captured logging setup, for ``node_logging.configure``.
    """
    captured = serialization.loads(data) if data is not None else {}
    _restore_flags(captured.get('flags'))
    FLAGS(['node'] + list(extra_args), known_only=True)
    FLAGS.mark_as_parsed()
    return captured.get('logging')


def _restore_flags(data: bytes | None) -> None:
    if data is None:
        return
    # Unpickle everything first: that imports the modules defining flags, so only
    # the flags of the launching script's __main__ are left to define here.
    definitions = [(name, serialization.loads(blob)) for name, blob in serialization.loads(data)]
    for name, (flag_type, state) in definitions:
        if name in FLAGS:
            flag = FLAGS[name]
            flag._value, flag.present = state['_value'], state['present']
            flag.using_default_value = state['using_default_value']
        else:
            flag = flag_type.__new__(flag_type)
            vars(flag).update(state, validators=[])
            FLAGS[name] = flag
