"""bench.fanin_admissions: a fan-in over ssh whose server times each TCP admission, each gRPC
``Endpoints`` answer and its own CPU, and whose clients say when they began.

Run as a process of its own: importing the bench wraps the courier's TCP door and gRPC
listener in the importing process (and pytest's must stay as shipped).
"""

import json
import subprocess
import sys

from conftest import REPO, ssh_host


def test_a_small_ssh_fan_in_times_every_connection_and_client(tmp_path):
    """3 clients over h1..h3, 4 calls each: every call counted, and every client's start,
    every TCP connection's admission and every Endpoints answer recorded on one clock."""
    ssh_host('h1')  # Fails, saying how to bring them up, when the test hosts are down.
    out = tmp_path / 'admissions.json'
    done = subprocess.run([sys.executable, '-m', 'bench.fanin_admissions', '--launch_type', 'ssh',
                           '--nodes', '3', '--calls', '4', '--json', str(out)],
                          capture_output=True, text=True, timeout=180, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert (result['calls'], result['expected_calls']) == (12, 12)
    clients = result['clients']
    assert clients['clients'] == 3
    assert all(began <= answered for began, answered in clients['each'])
    assert len(clients['endpoints_answered']) >= 3 and clients['server_cpu']
    admissions = result['admissions']
    assert admissions['admitted'] >= 3  # Every client's raw-TCP connection, and the launcher's.
    assert all(accepted <= queued <= taken <= admitted
               for accepted, queued, taken, admitted in admissions['each'])
    assert result['launch_called_s'] <= 0 <= admissions['last_call_s']
