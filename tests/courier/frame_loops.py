"""The ``loop`` fixture of the frame-loop tests: ``from frame_loops import loop``.

A module of its own, not a ``conftest.py``: the suite's tests import ``conftest`` by name
(tests/conftest.py), which a second one would shadow."""

from __future__ import annotations

import pytest

from launchpad_py.courier import frame_loop


@pytest.fixture(params=['compiled', 'pure'])
def loop(request, monkeypatch):
    """Connections opened in the test run the named frame loop (``LP_COURIER_PURE``)."""
    if request.param == 'pure':
        monkeypatch.setenv(frame_loop.PURE_ENV, '1')
    else:
        monkeypatch.delenv(frame_loop.PURE_ENV, raising=False)
    assert frame_loop.active() == request.param
    return request.param
