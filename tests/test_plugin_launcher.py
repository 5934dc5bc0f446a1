"""Launchers shipped as packages of their own, found through the ``launchpad_py.launchers``
entry-point group (the distribution is tests/plugin_launcher/, installed by putting it on
the import path, as pip's ``--target`` would)."""

import os

import pytest

import launchpad_py as lp
from launchpad_py.launchers import registry
from tests.nodes_for_tests import Pinger

PLUGIN_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'plugin_launcher')


@pytest.fixture
def plugin_installed(monkeypatch):
    monkeypatch.syspath_prepend(PLUGIN_PATH)
    yield
    registry._registered.pop('local_remote', None)  # Loaded from the entry point; forget it.


def _pinger_program(name):
    program = lp.Program(name)
    with program.group('pinger'):
        handle = program.add_node(lp.CourierNode(Pinger))
    return program, handle


def test_installed_plugin_launches_a_program(plugin_installed):
    """A program launched with the plugin's launch_type serves calls, and stops cleanly."""
    assert 'local_remote' in registry.known_names()
    program, handle = _pinger_program('plugin')
    with lp.launch(program, launch_type='local_remote') as controller:
        assert handle.dereference().ping(7) == ('pong', 7)
        assert [s.state for s in controller.statuses()] == [lp.NodeState.RUNNING]
    assert [s.state for s in controller.statuses()] == [lp.NodeState.STOPPED]


def test_plugin_capabilities_come_from_its_backend(plugin_installed):
    """The plugin says it cannot restart nodes, so the registry refuses lp.Restart up front,
    naming the built-in launchers that can."""
    program, _ = _pinger_program('plugin_refused')
    with pytest.raises(lp.ProgramError, match=r"local_remote cannot restart nodes, but "
                                              r"failure_policy gives lp.Restart to groups "
                                              r"\['pinger'\].*local_mt, local_mp, ssh, slurm, kubernetes or ray"):
        lp.launch(program, launch_type='local_remote',
                  failure_policy={'pinger': lp.Restart(max_restarts=1)})


def test_unknown_launch_type_lists_plugins_too(plugin_installed):
    """A misspelt launch type names every launcher there is, installed plugins included."""
    with pytest.raises(lp.UnknownLaunchTypeError, match=r'known: .*local_remote'):
        lp.launch(lp.Program('nothing'), launch_type='local_remot')
