"""The same-host socket directory when another user made it first."""

from __future__ import annotations

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

VICTIM = '''
import logging, sys
logging.basicConfig(level=logging.WARNING, format='%(message)s')
from launchpad_py import courier
from launchpad_py.courier.transports import uds
uds.SHARED_DIR = sys.argv[1]
class Echo:
    def echo(self, value):
        return value
with courier.Server(Echo()) as server:
    client = courier.Client(server.address, timeout=10)
    assert [client.echo(i) for i in range(3)] == [0, 1, 2]
    print('SOCKET', server.local_path, flush=True)
'''


def test_a_shared_directory_made_by_someone_else_is_refused_once_with_a_private_fallback(
        tmp_path):
    """A pre-made socket directory others can enter is refused, said once with its path and
    the remedy, and sockets go to a private directory instead (the fast path stays on)."""
    taken = tmp_path / 'launchpad_py-shared'
    taken.mkdir()
    os.chmod(taken, 0o777)  # As another user's directory would be to us: not ours alone.
    if os.geteuid() == 0:
        os.chown(taken, 65534, 65534)
    private = tmp_path / 'xdg'
    private.mkdir(mode=0o700)
    env = {**os.environ, 'XDG_RUNTIME_DIR': str(private), 'PYTHONPATH': REPO}
    env.pop('LAUNCHPAD_PY_SOCKET_DIR', None)
    done = subprocess.run([sys.executable, '-c', VICTIM, str(taken)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if str(taken) in line]
    assert len(warnings) == 1, done.stderr
    assert 'LAUNCHPAD_PY_SOCKET_DIR' in warnings[0]
    assert 'belongs to uid' in warnings[0] or 'lets others in' in warnings[0]
    socket_line = next(line for line in done.stdout.splitlines() if line.startswith('SOCKET'))
    assert socket_line.split()[1].startswith(str(private / 'launchpad_py') + '/')
