"""The status handle file and ``python -m launchpad_py.cli.status``."""

from __future__ import annotations

import json
import multiprocessing.connection as mpc
import os
import pickle
import stat
import subprocess
import sys
import threading

import pytest

import launchpad_py as lp
from launchpad_py.cli import status
from launchpad_py.observability import status_endpoint
from tests.conftest import REPO
from tests.observe_nodes import Counted


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    """A private run directory of this test, so other programs on the machine don't show."""
    path = tmp_path / 'run'
    monkeypatch.setenv(status_endpoint.RUN_DIR_ENV, str(path))
    return path


def _launch(name='watched', launch_type='local_mp'):
    program = lp.Program(name)
    handle = program.add_node(lp.CourierNode(Counted), label='server')
    return lp.launch(program, launch_type=launch_type), handle


def _status(*args, env_dir):
    env = dict(os.environ, **{status_endpoint.RUN_DIR_ENV: str(env_dir)})
    return subprocess.run([sys.executable, '-m', 'launchpad_py.cli.status', *args], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=60)


def test_handle_file_is_private_and_holds_no_program_secret(run_dir):
    """The handle file is 0600 in a 0700 directory and does not contain the program secret."""
    controller, _ = _launch(launch_type='local_mt')
    with controller:
        path = controller.status_handle
        mode = stat.S_IMODE(os.stat(path).st_mode)
        dir_mode = stat.S_IMODE(os.stat(run_dir).st_mode)
        with open(path, 'rb') as handle_file:
            content = handle_file.read()
        secret = controller.scope.secret
    assert (mode, dir_mode) == (0o600, 0o700)
    assert secret and secret not in content and secret.hex().encode() not in content


def test_handle_file_goes_when_the_program_ends(run_dir):
    """After the program stops, neither the handle file nor its socket is left."""
    controller, _ = _launch()
    with controller:
        path = controller.status_handle
        socket_path = json.load(open(path))['socket']
    assert not os.path.exists(path) and not os.path.exists(socket_path)


def test_status_table_counts_known_traffic(run_dir):
    """Found by name, the table shows the node and exactly the 42 calls made."""
    controller, handle = _launch()
    with controller:
        client = handle.dereference()
        for i in range(42):
            client.echo(i)
        done = _status('watched', '--once', env_dir=run_dir)
    assert done.returncode == 0, done.stderr
    assert "program 'watched' (local_mp, running)" in done.stdout
    assert 'server/0' in done.stdout and 'echo: 42 calls, 0 failed' in done.stdout


def test_status_by_handle_file_as_json(run_dir):
    """--handle FILE --json gives the statistics of that program as JSON."""
    controller, handle = _launch()
    with controller:
        handle.dereference().echo(1)
        done = _status('--handle', controller.status_handle, '--once', '--json', env_dir=run_dir)
    report = json.loads(done.stdout)
    assert [n['name'] for n in report['nodes']] == ['server/0']
    assert report['nodes'][0]['calls'] == 1


def test_status_without_program_says_so(run_dir):
    """With nothing running, the command fails with a message saying what to do."""
    done = _status('nothing_here', '--once', env_dir=run_dir)
    assert done.returncode != 0 and "no running program named 'nothing_here'" in done.stderr


def test_wrong_key_is_refused(run_dir):
    """A reader without the handle file's key gets no statistics."""
    controller, _ = _launch(launch_type='local_mt')
    with controller:
        handle = status.read_handle(controller.status_handle)
        with pytest.raises(mpc.AuthenticationError):
            mpc.Client(handle['socket'], family='AF_UNIX', authkey=b'not the key')


def test_unsafe_run_directory_is_refused(tmp_path, monkeypatch):
    """A run directory others may read is not used; the error says why and how to fix it."""
    path = tmp_path / 'open'
    path.mkdir(mode=0o755)
    os.chmod(path, 0o755)
    monkeypatch.setenv(status_endpoint.RUN_DIR_ENV, str(path))
    with pytest.raises(PermissionError, match='mode 0700'):
        status_endpoint.run_dir(create=True)


class _Bomb:
    """Unpickling this creates ``path``."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return open, (self.path, 'w')


def _forged_status(directory, bomb: str, file_mode: int = 0o600, dir_mode: int = 0o700):
    """A handle file and a status socket as another user would forge them: the socket answers
    with a pickle that runs code. Returns the handle path, the socket path and its thread."""
    directory.mkdir(mode=dir_mode)
    os.chmod(directory, dir_mode)
    key = os.urandom(32)
    socket_path = str(directory / 'forged.sock')
    listener = mpc.Listener(socket_path, family='AF_UNIX', authkey=key)

    def serve():
        try:
            with listener.accept() as connection:
                connection.recv()
                connection.send(('reply', _Bomb(bomb)))
        except (OSError, EOFError, mpc.AuthenticationError):
            pass
        finally:
            listener.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    path = directory / 'forged.json'
    path.write_text(json.dumps({'program': 'forged', 'launch_type': 'x', 'pid': os.getpid(),
                                'socket': socket_path, 'key': key.hex(), 'started': 0}))
    os.chmod(path, file_mode)
    return str(path), socket_path, thread


def _end(socket_path: str, thread) -> None:
    try:  # Wakes the forged server if the status command never connected.
        mpc.Client(socket_path, family='AF_UNIX', authkey=b'x').close()
    except (OSError, mpc.AuthenticationError, EOFError):
        pass
    thread.join(10)


@pytest.mark.parametrize('file_mode, dir_mode', [(0o644, 0o700), (0o600, 0o755)])
def test_status_refuses_a_handle_file_or_socket_others_could_have_made(
        tmp_path, file_mode, dir_mode):
    """--handle with a file others may write, or a socket in a directory others may enter,
    is refused before connecting: the command names the file and runs nothing."""
    bomb = str(tmp_path / 'ran')
    path, socket_path, thread = _forged_status(tmp_path / 'forged', bomb, file_mode, dir_mode)
    try:
        done = _status('--handle', path, '--once', env_dir=tmp_path / 'run')
    finally:
        _end(socket_path, thread)
    assert done.returncode != 0 and 'refusing the' in done.stderr and 'forged' in done.stderr
    assert not os.path.exists(bomb)


def test_status_reads_replies_as_plain_data_only(tmp_path):
    """A status socket that answers with a pickle naming code is refused, not unpickled."""
    bomb = str(tmp_path / 'ran')
    path, socket_path, thread = _forged_status(tmp_path / 'forged', bomb)
    try:
        with pytest.raises(pickle.UnpicklingError, match='only plain data'):
            status.query(status.read_handle(path))
    finally:
        _end(socket_path, thread)
    assert not os.path.exists(bomb)
