"""Carries the launching script's parsed absl flags into node processes.

Node code is pickled, and flags defined in the launching script's
``__main__`` would not exist in a node process. So the launcher sends each
flag's definition and value; the worker defines what is missing and sets
every value, before any node code runs.
"""

from __future__ import annotations

from absl import flags

from launchpad_py.courier import serialization

FLAGS = flags.FLAGS


def capture() -> bytes | None:
    """The launcher's flags, or None when it never parsed any (tests, notebooks)."""
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


def restore(data: bytes | None, extra_args: list[str]) -> None:
    """Defines and sets the launcher's flags here, then applies the group's extra args."""
    if data is not None:
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
    FLAGS(['node'] + list(extra_args), known_only=True)
    FLAGS.mark_as_parsed()
