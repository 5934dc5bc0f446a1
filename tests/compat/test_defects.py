"""Known defects of DeepMind Launchpad that must not exist here.

Others are covered elsewhere: crash detection in every terminal mode
(test_launchers.py::test_crash_detection_does_not_depend_on_the_terminal), a stubborn node
killed while the launcher exits 0 (test_lifecycle.py::test_node_ignoring_stop_is_killed_...),
flags reaching local_mp nodes (test_lifecycle.py::test_flags_of_the_launching_script_...),
stop handlers run once (test_conformance.py::test_stop_handlers_run_once_in_order), and
batched handlers with 3+ callers and numbers (tests/courier, with lp.batched_handler).
"""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import launchpad_py as lp
from conftest import REPO
from nodes_for_tests import Echo, serve_forever


@pytest.mark.parametrize('value', [np.float32(1.5), np.int64(3), np.bool_(True),
                                   np.arange(6).reshape(2, 3), np.zeros((), np.float16)])
def test_numpy_arguments_do_not_hang_the_server(value):
    """Numpy arrays and numpy scalars as arguments come back intact, across processes."""
    program = lp.Program('numpy_args')
    handle = program.add_node(lp.CourierNode(Echo, courier_client_kwargs={'timeout': 30}),
                              label='echo')
    with lp.launch(program, launch_type='test_mp'):
        returned, type_name = handle.dereference().echo(value)
    assert type_name == type(value).__name__
    np.testing.assert_array_equal(returned, value)
    assert np.asarray(returned).dtype == np.asarray(value).dtype


def test_launch_stop_and_handlers_work_outside_the_main_thread():
    """lp.launch, lp.register_stop_handler and lp.stop all work from a worker thread."""
    outcome = {}

    def in_a_thread():
        program = lp.Program('threaded')
        program.add_node(lp.PyNode(serve_forever), label='waiter')
        controller = lp.launch(program, launch_type='test_mp')
        lp.register_stop_handler(lambda: outcome.setdefault('handler', 'ran'))
        lp.stop()
        controller.wait(timeout=60)
        outcome['states'] = [s.state for s in controller.statuses()]

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(in_a_thread).result(timeout=90)
    assert outcome == {'handler': 'ran', 'states': [lp.NodeState.STOPPED]}


def test_import_launchpad_is_untouched_without_opting_in(tmp_path):
    """With another `launchpad` installed, it stays what `import launchpad` finds."""
    fake = tmp_path / 'launchpad'
    fake.mkdir()
    (fake / '__init__.py').write_text("WHO = 'the original'\n")
    env = {**os.environ, 'PYTHONPATH': str(tmp_path)}
    env.pop('LAUNCHPAD_PY_PRELOAD', None)
    plain = subprocess.run([sys.executable, '-c', 'import launchpad_py, launchpad; print(launchpad.WHO)'],
                           capture_output=True, text=True, timeout=60, env=env, cwd=REPO)
    assert plain.stdout.strip() == 'the original', plain.stderr
    script = tmp_path / 'which.py'
    script.write_text('import launchpad\nprint(launchpad.__name__)\n')
    opted = subprocess.run([sys.executable, '-m', 'launchpad_py.compat', str(script)],
                           capture_output=True, text=True, timeout=60, env=env, cwd=REPO)
    assert opted.stdout.strip() == 'launchpad_py', opted.stderr


def test_install_and_uninstall_in_process():
    """compat.install() aliases launchpad and courier; uninstall() removes the aliases."""
    from launchpad_py import compat
    compat.install()
    try:
        import courier
        import launchpad
        assert launchpad is lp
        assert courier.Client.__module__ == 'launchpad_py.compat.courier'
        assert 'launchpad_py.compat.activate' in os.environ['LAUNCHPAD_PY_PRELOAD']
    finally:
        compat.uninstall()
    assert 'launchpad' not in sys.modules
    assert 'launchpad_py.compat.activate' not in os.environ.get('LAUNCHPAD_PY_PRELOAD', '')


def test_original_style_courier_server_and_client():
    """Bind/Start/Stop/Join and Client(call_timeout=...) behave as the original's did."""
    from launchpad_py.compat import courier
    server = courier.Server(thread_pool_size=4)
    server.Bind('add', lambda a, b: a + b)
    assert not server.has_started
    server.Start()
    client = courier.Client(server.address, call_timeout=10)
    assert client.add(2, 3) == 5
    assert courier.list_methods(client) == ['add']
    joined = threading.Thread(target=server.Join)
    joined.start()
    server.Stop()
    joined.join(30)
    assert not joined.is_alive()
    with pytest.raises(ValueError, match='already started'):
        server.Start()


def test_deferred_is_built_inside_the_node():
    """lp.Deferred carries an unpicklable object's recipe; the node builds it, handles resolved."""
    program = lp.Program('deferred')
    echo = program.add_node(lp.CourierNode(Echo), label='echo')
    lock_recipe = lp.Deferred(threading.Lock)
    client_recipe = lp.Deferred(dict, peer=echo)
    program.add_node(lp.PyNode(_check_deferred, lock_recipe, client_recipe), label='check')
    with lp.launch(program, launch_type='test_mp') as controller:
        controller.wait(timeout=60)
    assert lp.maybe_dereference(5) == 5


def _check_deferred(lock, peers):
    assert type(lock).__name__ == 'lock', lock
    assert peers['peer'].echo('hi') == ('hi', 'str')
    lp.stop()
