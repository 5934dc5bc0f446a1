"""Module paths the docs named before the layout by role keep working for one release, warning."""

import importlib
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MOVED = {
    'launchpad_py.graph': 'launchpad_py.cli.draw',
    'launchpad_py.status': 'launchpad_py.cli.status',
    'launchpad_py.launchers.worker': 'launchpad_py.node_side.local_node_main',
    'launchpad_py.launchers.remote_node': 'launchpad_py.node_side.remote_node_main',
}


@pytest.mark.parametrize('old, new', MOVED.items())
def test_old_import_path_is_the_new_module_with_a_warning(monkeypatch, old, new):
    """Importing the old name warns and gives the module at the new one."""
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=f'{old} moved to {new}'):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


@pytest.mark.parametrize('old, new', [('launchpad_py.graph', 'launchpad_py.cli.draw'),
                                      ('launchpad_py.status', 'launchpad_py.cli.status')])
def test_old_command_runs_the_new_one_with_a_warning(old, new):
    """``python -m`` with the old name runs the tool and says where it went."""
    result = subprocess.run([sys.executable, '-m', old, '--help'], cwd=REPO, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert f'python -m {new}' in result.stdout
    assert f'DeprecationWarning: {old} moved to {new}' in result.stderr


@pytest.mark.parametrize('old, new', [('uds', 'transports.uds'),
                                      ('socket_channel', 'transports.sockets.socket_channel')])
def test_a_courier_module_moved_into_transports_is_found_with_a_warning(old, new):
    """``from launchpad_py.courier import uds`` (as code written before issue 24 does) warns
    and gives the module at its new path."""
    from launchpad_py import courier
    with pytest.warns(DeprecationWarning, match=f'launchpad_py.courier.{old} moved to '
                                                f'launchpad_py.courier.{new}'):
        module = getattr(courier, old)
    assert module is importlib.import_module(f'launchpad_py.courier.{new}')
