"""Functions sent by value keep the file they came from, for node logs and tracebacks."""

from __future__ import annotations

import traceback

import pytest

from launchpad_py.courier import serialization


def _function_sent_by_value():
    def divide(x):  # A local function: cloudpickle sends it by value, with its code.
        return 1 / x
    return divide


@pytest.mark.parametrize('how', ['dumps', 'encode'])
def test_code_sent_by_value_names_its_file_and_line(how):
    """cloudpickle 3.1.3 renames every such code object ``<dynamic-code>``; absl log lines and
    remote tracebacks then lost the script and line they point at (failed before with 3.1.3)."""
    original = _function_sent_by_value()
    if how == 'dumps':
        copy = serialization.loads(serialization.dumps(original))
    else:
        copy = serialization.decode(*serialization.encode(original))
    assert copy is not original and copy.__code__.co_filename == __file__
    with pytest.raises(ZeroDivisionError) as raised:
        copy(0)
    where = traceback.extract_tb(raised.value.__traceback__)[-1]
    assert (where.filename, where.lineno) == (__file__, original.__code__.co_firstlineno + 1)
    assert where.line == 'return 1 / x'
