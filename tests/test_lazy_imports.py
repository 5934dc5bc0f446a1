"""A node that never touches numpy or gRPC does not load them (issue 25).

A single-node pod is one fresh interpreter; numpy (13 MiB) and gRPC (12 MiB) were half
of its memory, loaded by ``courier`` at import. Each test runs a fresh interpreter, since
this one has both loaded already.
"""

import json
import subprocess
import sys

import pytest

HEAVY = ('numpy', 'grpc')
# What a node never uses: the launchers, the dashboard's web server, cluster submission.
LAUNCHER_SIDE = ('launchpad_py.launchers', 'launchpad_py.observability',
                 'launchpad_py.submission', 'http.server')


def _loaded_after(code: str, names=HEAVY) -> dict:
    """Runs ``code`` in a fresh interpreter; which of ``names`` it left in ``sys.modules``."""
    script = code + f'\nimport json, sys\nprint(json.dumps({{m: m in sys.modules for m in {names!r}}}))'
    done = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize('module', ['launchpad_py', 'launchpad_py.node_side.remote_node_main',
                                    'launchpad_py.courier', 'launchpad_py.compat'])
def test_importing_the_node_entry_point_loads_neither_numpy_nor_grpc(module):
    """What every single-node pod imports at start leaves numpy and gRPC unloaded."""
    assert _loaded_after(f'import {module}') == {'numpy': False, 'grpc': False}


def test_a_served_call_without_arrays_does_not_load_numpy():
    """A courier server and client that pass no arrays never load numpy; gRPC, whose port
    is the server's address, is loaded by the server's start."""
    loaded = _loaded_after(
        'from launchpad_py import courier\n'
        'class Counter:\n'
        '    def add(self, n):\n'
        '        return n + 1\n'
        'with courier.Server(Counter()) as server:\n'
        '    assert courier.Client(server.address).add(1) == 2\n'
        "    assert courier.Client(server.address, transport='grpc').add(2) == 3\n")
    assert loaded == {'numpy': False, 'grpc': True}


def test_batching_numbers_loads_numpy_when_it_stacks_them():
    """numpy is loaded on first use: a batched handler given numbers stacks them into an
    array, as before."""
    loaded = _loaded_after(
        'from launchpad_py.courier import pytree\n'
        '[stacked] = pytree.stack([[1, 2]])\n'
        "assert type(stacked).__name__ == 'ndarray' and stacked.tolist() == [1, 2]\n"
        "assert pytree.signature(3) == ('array', ())\n")
    assert loaded['numpy'] is True


def test_a_grpc_failure_still_maps_to_the_courier_tree():
    """The gRPC error mapping, which imports gRPC on first use, still names the status."""
    import grpc

    from launchpad_py.courier import errors

    class Refused(grpc.RpcError):
        def code(self):
            return grpc.StatusCode.UNAVAILABLE

        def details(self):
            return 'connection refused'

    error = errors.translate_rpc_error(Refused(), '127.0.0.1:1', 'step')
    assert isinstance(error, errors.CourierUnavailableError)
    assert "'step' on 127.0.0.1:1: connection refused" in str(error)


@pytest.mark.parametrize('module', ['launchpad_py', 'launchpad_py.node_side.remote_node_main'])
def test_a_node_does_not_load_launcher_side_code(module):
    """The package and a pod's entry point leave launchers, dashboard and submission
    unloaded: public names resolve on first use (issue 25)."""
    assert _loaded_after(f'import {module}', LAUNCHER_SIDE) == dict.fromkeys(LAUNCHER_SIDE, False)


def test_a_public_name_loads_its_module_on_first_use():
    """``lp.launch`` and ``from launchpad_py import X`` still work, loading what they need."""
    loaded = _loaded_after('import launchpad_py as lp\n'
                           'from launchpad_py import Program, launch\n'
                           'assert lp.launch is launch and lp.Program is Program\n'
                           "assert 'launch' in dir(lp) and 'launch' in lp.__all__\n",
                           LAUNCHER_SIDE)
    assert loaded['launchpad_py.launchers'] is True


def test_an_unknown_name_is_an_attribute_error():
    import launchpad_py as lp
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        lp.no_such_name  # noqa: B018


def test_app_run_still_parses_the_launch_type_flag():
    """The flags stay defined on import, so absl's ``app.run`` accepts ``--lp_launch_type``."""
    script = ('from absl import app\n'
              'import launchpad_py as lp\n'
              'def main(argv):\n'
              '    print(lp.flags.LAUNCH_TYPE.value)\n'
              'app.run(main)\n')
    done = subprocess.run([sys.executable, '-c', script, '--lp_launch_type=local_mp'],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == 'local_mp'


def test_a_subpackage_is_still_an_attribute():
    """``lp.launchers`` and ``lp.program``, which the eager ``__init__`` left loaded, still
    resolve (importing the subpackage)."""
    loaded = _loaded_after('import launchpad_py as lp\n'
                           'assert lp.launchers.LaunchType("local_mp") is lp.LaunchType("local_mp")\n',
                           LAUNCHER_SIDE)
    assert loaded['launchpad_py.launchers'] is True
