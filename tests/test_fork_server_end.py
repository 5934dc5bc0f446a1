"""The fork server ends quietly when its launcher has gone, whatever it was doing then.

At the stop of a 2,000-node launch the launcher closed its end while the server was still
reporting children's exits, and the server died printing a ``ConnectionResetError`` traceback
onto the launcher's terminal.
"""

import os
import pickle
import socket
import subprocess
import sys

from conftest import REPO


def test_a_server_whose_launcher_closed_during_a_request_exits_quietly(tmp_path):
    """A request the launcher sent just before closing its end is forked (the child finds no
    spec and ends), the answer has nowhere to go: the server exits 0 with nothing on stderr."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with theirs:
        server = subprocess.Popen(
            [sys.executable, '-m', 'launchpad_py.node_side.fork_server', str(theirs.fileno()),
             '0'], pass_fds=[theirs.fileno()], cwd=REPO, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    null = os.open(os.devnull, os.O_RDWR)
    try:
        request = pickle.dumps(('spawn', 0, str(tmp_path / 'no-such-spec'), dict(os.environ),
                                str(tmp_path)))
        socket.send_fds(ours, [request], [null, null, null])
    finally:
        os.close(null)
        ours.close()  # Before the server has read the request: its answer finds no one.
    _, stderr = server.communicate(timeout=120)
    assert server.returncode == 0 and 'Traceback' not in stderr, stderr
