"""dm-reverb and TensorFlow stay optional: not imported by the core, asked for by ReverbNode."""

from __future__ import annotations

import importlib.util
import json

import pytest

import launchpad_py as lp
from conftest import run_script


def test_importing_the_package_loads_neither_reverb_nor_tensorflow():
    """`import launchpad_py` does not import reverb or TensorFlow, even where installed."""
    result = run_script('import sys, json, launchpad_py\n'
                        'print(json.dumps([m for m in ("reverb", "tensorflow") if m in sys.modules]))')
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


@pytest.mark.skipif(importlib.util.find_spec('reverb') is not None,
                    reason='dm-reverb is installed here; this checks the error given without it')
def test_reverb_node_without_reverb_names_the_install_line():
    """Making a ReverbNode without dm-reverb fails with the exact pip line."""
    with pytest.raises(ModuleNotFoundError) as info:
        lp.ReverbNode(list)
    assert "pip install 'launchpad_py[reverb]'" in str(info.value)
