"""The SSH launcher on real sshd: three network-namespace hosts h1..h3 and sshd on loopback (lo).

The hosts come from ../shared/infra/ssh_hosts.sh (CI brings them up); they
share this filesystem and process table, so remote pids are visible here.
With ``LP_SSH_TEST_HOSTS=p`` the same tests run on the share-nothing hosts
p1..p3 (scripts/private_hosts.sh), the code shipped; nothing here may then
lean on a shared path.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import psutil
import pytest

import launchpad_py as lp
from launchpad_py import courier
from conftest import (REPO, SSH_OPTIONS, host_name, launcher_report, marked_processes, needs_ssh_hosts,
                      ssh_host, wait_for, wait_for_node_line)
from nodes_for_tests import Pinger, serve_forever
from ssh_nodes import BIG, print_gpus, store_program, use_store

pytestmark = needs_ssh_hosts


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its parent does not count)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_until_gone(token: str, timeout: float) -> float:
    """Seconds until no process holds ``token``; fails after ``timeout``."""
    start = time.monotonic()
    wait_for(lambda: not marked_processes(token), timeout=timeout,
             what=f'processes of {token} to end')
    return time.monotonic() - start


def test_server_on_h2_serves_clients_on_h1_and_h3():
    """Clients on h1 and h3 make calls, futures and 64 MiB round trips to a server on h2;
    what each saw comes back on its output (no shared path)."""
    program, store = store_program()
    resources = {'store': ssh_host('h2', env={'LP_TEST_HOST': 'h2'}),
                 'client': [ssh_host('h1', env={'LP_TEST_HOST': 'h1'}),
                            ssh_host('h3', env={'LP_TEST_HOST': 'h3'})]}
    with lp.launch(program, launch_type='ssh', resources=resources) as controller:
        wait_for(lambda: all(s.state == lp.NodeState.FINISHED or not controller.is_running
                             for s in controller.statuses() if s.label == 'client'),
                 timeout=120, what='both clients to finish')
    hosts = {(s.label, s.index): s.host for s in controller.statuses()}
    assert hosts == {('store', 0): host_name('h2'), ('client', 0): host_name('h1'),
                     ('client', 1): host_name('h3')}
    assert store.address.resolve().startswith('10.250.0.12:')
    for index, host in enumerate(['h1', 'h3']):
        result = json.loads(controller.output_tail(f'client/{index}').split('RESULT ')[1])
        assert result['client_host'] == host and result['server_host'] == 'h2'
        assert result['echo'] == 'hello' and result['futures'] == list(range(50))
        assert result['big_bytes'] == BIG * 4 and result['big_equal']
        assert result['big_total'] == float(BIG) * (BIG - 1) / 2


def test_status_shows_host_and_remote_pid():
    """Statuses name each node's host and the pid of its process there."""
    program = lp.Program('status')
    program.add_node(lp.PyNode(serve_forever), label='waiter')
    with lp.launch(program, launch_type='ssh', resources={'waiter': ssh_host('h3')}) as controller:
        (status,) = controller.statuses()
        assert status.host == host_name('h3')
        process = psutil.Process(status.pid)
        # Forked by the host's agent, in a session (process group) of its own.
        assert 'launchpad_py.node_side.host_agent' in ' '.join(process.parent().cmdline())
        assert os.getsid(status.pid) == status.pid
        assert os.path.basename(os.readlink(f'/proc/{status.pid}/ns/net')) != os.path.basename(
            os.readlink('/proc/self/ns/net')), 'the node should run in h3 network namespace'


def test_loopback_address_is_unreachable_from_another_host():
    """A server on this host's 127.0.0.1 cannot be reached from h1: loopback is per host.

    h1 runs servers of its own (a Ray worker, sshd, nodes of other tests) on its loopback, so
    the server's port may be taken there by chance: such a port proves nothing, and the test
    serves again on another (CI saw a connect succeed to a port h1 itself listened on)."""
    # h1's own TCP listeners on that port, from /proc/net/tcp{,6} (state 0A: LISTEN), then a
    # connect to 127.0.0.1 there.
    probe = ('import socket, sys; port = int(sys.argv[1]); '
             'own = any(int(f.split()[1].split(":")[1], 16) == port and f.split()[3] == "0A" '
             'for n in ("/proc/net/tcp", "/proc/net/tcp6") for f in open(n).readlines()[1:]); '
             's = socket.socket(); s.settimeout(5); '
             'print("own" if own else s.connect_ex(("127.0.0.1", port)))')
    for _ in range(5):
        with courier.Server(Pinger()) as server:
            done = subprocess.run(['ssh', *SSH_OPTIONS, 'h1',
                                   f'{sys.executable} -c {probe!r} {server.port}'],
                                  capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        if done.stdout.strip() != 'own':
            break
    else:
        pytest.fail('h1 listened on each of 5 ports our server took here')
    assert int(done.stdout.strip()) != 0  # Refused there, though it listens here.


def test_program_that_would_hand_out_loopback_across_hosts_fails():
    """A node reached through loopback (host lo) cannot serve nodes on h1: the launch says why."""
    program = lp.Program('mixed')
    pinger = program.add_node(lp.CourierNode(Pinger), label='pinger')
    program.add_node(lp.PyNode(use_store, pinger, '/dev/null'), label='client')
    resources = {'pinger': ssh_host('lo'), 'client': ssh_host('h1')}
    with pytest.raises(lp.LaunchError, match=r"on host 'lo' would listen on 127\.0\.0\.1:\d+, "
                                             rf"a loopback address that nodes on \['{host_name('h1')}'\]"):
        lp.launch(program, launch_type='ssh', resources=resources)


def test_crash_on_one_host_fails_program_naming_the_host():
    """A node that raises on h3 stops the nodes on the other hosts; wait() names node and host."""
    from nodes_for_tests import crash
    program = lp.Program('crashing')
    program.add_node(lp.CourierNode(Pinger), label='pinger')
    program.add_node(lp.PyNode(crash, 'boom on h3'), label='crasher')
    controller = lp.launch(program, launch_type='ssh', resources={
        'pinger': ssh_host('h1'), 'crasher': ssh_host('h3')})
    with pytest.raises(lp.NodeFailedError, match=rf"'crasher'.*boom on h3 \(on host {host_name('h3')}\)") as info:
        controller.wait(timeout=60)
    assert "raise ValueError(message)" in info.value.remote_traceback
    states = {s.label: s.state for s in controller.statuses()}
    assert states == {'pinger': lp.NodeState.STOPPED, 'crasher': lp.NodeState.FAILED}


def test_bad_hosts_are_each_named_before_anything_starts(tmp_path):
    """Down host, no python, no or another launchpad_py, no workdir: one line each, no node.

    It plants the old launchpad_py through the shared filesystem, so it always runs on h1..h3.
    """
    def ssh_host(name, **options):
        return lp.SshHost(name, ssh_options=SSH_OPTIONS, **options)

    old = tmp_path / 'old'  # An installed launchpad_py of another version.
    (old / 'launchpad_py').mkdir(parents=True)
    (old / 'launchpad_py' / '__init__.py').write_text('')
    (old / 'launchpad_py-0.0.1.dist-info').mkdir()
    (old / 'launchpad_py-0.0.1.dist-info' / 'METADATA').write_text(
        'Metadata-Version: 2.1\nName: launchpad_py\nVersion: 0.0.1\n')
    program = lp.Program('badhosts')
    labels = ['down', 'nopython', 'nolp', 'oldlp', 'noworkdir', 'fine']
    for label in labels:
        program.add_node(lp.PyNode(serve_forever), label=label)
    resources = {
        'down': ssh_host('lo', port=1),  # Nothing listens there.
        'nopython': ssh_host('h1', python='/nonexistent/python3'),
        'nolp': ssh_host('h2', python='/usr/bin/python3', workdir=str(tmp_path),
                         env={'PYTHONPATH': str(tmp_path)}),
        'oldlp': ssh_host('h3', python='/usr/bin/python3', workdir=str(old),
                          env={'PYTHONPATH': str(old)}),
        'noworkdir': ssh_host('h3', workdir=str(tmp_path / 'missing')),
        'fine': ssh_host('h1'),
    }
    with pytest.raises(lp.LaunchError) as info:
        lp.launch(program, launch_type='ssh', resources=resources)
    lines = str(info.value).splitlines()
    assert lines[0] == 'the ssh launcher cannot use these hosts; nothing was started:'
    assert len(lines) == 6, str(info.value)
    text = str(info.value)
    assert 'lo:1: unreachable over ssh: ' in text and 'Connection refused' in text
    assert "h1: python '/nonexistent/python3' cannot run there" in text
    assert ("h2: launchpad_py cannot be imported there (ModuleNotFoundError: No module named "
            "'launchpad_py'); install it with: /usr/bin/python3 -m pip install launchpad_py==") \
        in text
    assert f'h3: launchpad_py 0.0.1 is installed there ({old}/launchpad_py), the launcher ' in text
    assert f"h3: workdir '{tmp_path / 'missing'}' does not exist there" in text


def test_group_without_host_is_named():
    """Every group needs a host; the error names the group that has none."""
    program = lp.Program('nohost')
    program.add_node(lp.PyNode(serve_forever), label='placed')
    program.add_node(lp.PyNode(serve_forever), label='forgotten')
    with pytest.raises(lp.ResourcesError, match="group 'forgotten' of program 'nohost' has no host"):
        lp.launch(program, launch_type='ssh', resources={'placed': ssh_host('h1')})


def test_gpus_set_cuda_visible_devices_on_that_host():
    """gpus=[...] reaches the node as CUDA_VISIBLE_DEVICES; other groups then see no GPU."""
    program = lp.Program('gpus')
    program.add_node(lp.PyNode(print_gpus), label='learner')
    program.add_node(lp.PyNode(print_gpus), label='actor')
    resources = {'learner': ssh_host('h1', gpus=[1, 0]), 'actor': ssh_host('h2')}
    with lp.launch(program, launch_type='ssh', resources=resources) as running:
        learner = wait_for_node_line(running, 'learner/0', 'CUDA_VISIBLE_DEVICES=')
        actor = wait_for_node_line(running, 'actor/0', 'CUDA_VISIBLE_DEVICES=')
    assert (learner, actor) == ('CUDA_VISIBLE_DEVICES=1,0', 'CUDA_VISIBLE_DEVICES=')


def _start_spread_launcher(token: str, **env: str) -> tuple[subprocess.Popen, list]:
    launcher = subprocess.Popen([sys.executable, os.path.join(REPO, 'tests', 'ssh_nodes.py'),
                                 token], cwd=REPO, stdout=subprocess.PIPE, text=True,
                                env={**os.environ, 'PYTHONPATH': os.path.join(REPO, 'tests'),
                                     **env})
    return launcher, launcher_report(launcher.stdout)


def test_sigkill_of_launcher_leaves_no_process_on_any_host():
    """SIGKILL the launcher: every node (and colocated child) on h1..h3 is gone within seconds."""
    token = f'lp-sigkill-{uuid.uuid4().hex}'
    launcher, nodes = _start_spread_launcher(token)
    assert sorted(host for host, _ in nodes) == [host_name(h) for h in ('h1', 'h2', 'h3')]
    # Three nodes and two colocated children at least.
    assert len(marked_processes(token)) >= 3 + 2
    launcher.kill()
    launcher.wait(timeout=10)
    launcher.stdout.close()
    seconds = _wait_until_gone(token, timeout=15)
    print(f'all remote processes gone {seconds:.2f}s after SIGKILL of the launcher')


def test_dropped_ssh_connection_ends_the_node_and_fails_the_program():
    """Killing one node's ssh client ends that node on its host and fails the program."""
    token = f'lp-drop-{uuid.uuid4().hex}'
    program = lp.Program('drop')
    program.add_node(lp.PyNode(serve_forever), label='waiter')
    program.add_node(lp.PyNode(serve_forever), label='other')
    env = {'LP_TEST_TOKEN': token}
    controller = lp.launch(program, launch_type='ssh', resources={
        'waiter': ssh_host('h2', env=env), 'other': ssh_host('h3')})
    (waiter,) = [s for s in controller.statuses() if s.label == 'waiter']
    clients = [p for p in psutil.Process().children() if 'ssh' == p.name()
               and token in ' '.join(p.cmdline())]
    assert len(clients) == 1
    clients[0].kill()
    seconds = _wait_until_gone(token, timeout=15)
    print(f'the node on h2 was gone {seconds:.2f}s after its ssh connection dropped')
    with pytest.raises(lp.NodeFailedError,
                       match=rf"'waiter'.*connection to {host_name('h2')} ended"):
        controller.wait(timeout=30)
    assert not _alive(waiter.pid)


def test_frozen_launcher_nodes_end_after_heartbeat_timeout():
    """A launcher that stops answering (SIGSTOP, like a lost host) loses its nodes within seconds.

    Its connections stay open, so only the heartbeat can tell: the host agent's, which
    kills its nodes after ``AGENT_TIMEOUT_S`` without a ping (twice the heartbeat timeout:
    this test sat 10 s through it). The launcher here keeps that timeout while it launches
    (a loaded machine can leave agents unpinged for seconds then) and tells its agents
    three pings' worth once its nodes are up.
    """
    from launchpad_py.launchers.remote.launch import HEARTBEAT_S
    timeout = 3 * HEARTBEAT_S
    token = f'lp-frozen-{uuid.uuid4().hex}'
    launcher, nodes = _start_spread_launcher(token, LP_TEST_AGENT_TIMEOUT_S=str(timeout))
    launcher.send_signal(signal.SIGSTOP)
    try:
        node_pids = [pid for _, pid in nodes]
        start = time.monotonic()
        wait_for(lambda: not any(map(_alive, node_pids)), timeout=timeout + 10,
                 what='nodes to notice the silent launcher')
        seconds = time.monotonic() - start
    finally:
        launcher.kill()
        launcher.send_signal(signal.SIGCONT)
        launcher.wait(timeout=10)
        launcher.stdout.close()
    assert seconds >= timeout - 1.5  # They waited for the timeout, not less.
    _wait_until_gone(token, timeout=15)


def test_ctrl_c_stops_nodes_on_every_host_gracefully():
    """SIGINT to the launching script stops the program; the script exits 0 and nothing is left."""
    token = f'lp-sigint-{uuid.uuid4().hex}'
    launcher, _ = _start_spread_launcher(token)
    launcher.send_signal(signal.SIGINT)
    assert launcher.wait(timeout=30) == 0
    launcher.stdout.close()
    _wait_until_gone(token, timeout=15)


def test_node_lost_while_others_start_ends_them_without_waiting_for_grace():
    """A node whose process dies before dialing back ends the launch; the others stop at once.

    They are still waiting for the address table, so a stop must reach them
    there instead of the grace period running out.
    """
    from launchpad_py.launchers.remote import launch as remote
    from launchpad_py.launchers.options import LaunchOptions
    from launchpad_py.launchers.ssh.host import check_hosts
    program = lp.Program('lost')
    program.add_node(lp.PyNode(serve_forever), label='healthy')
    program.add_node(lp.PyNode(serve_forever), label='lost')
    host = ssh_host('h1')
    (launcher_ip,) = check_hosts([host]).values()
    argv = host.ssh_argv(host.remote_command(['-m', 'launchpad_py.node_side.remote_node_main']))
    placements = {('healthy', 0): remote.Placement(argv, 'h1', launcher_ip),
                  ('lost', 0): remote.Placement(['sh', '-c', 'exit 7'], 'nowhere', launcher_ip)}
    start = time.monotonic()
    with pytest.raises(lp.LaunchError, match=r"'lost'.*ended before it reached the launcher"):
        remote.launch(program, LaunchOptions(grace=60.0), 'ssh', placements)
    assert time.monotonic() - start < 30, 'the healthy node was left to the grace period'


def test_program_secret_is_on_no_command_line_or_environment():
    """The secret reaches nodes over ssh stdin: no process of the launch shows it in argv or env."""
    from launchpad_py.courier import auth
    token = f'lp-secret-{uuid.uuid4().hex}'
    program = lp.Program('secretive')
    pinger = program.add_node(lp.CourierNode(Pinger), label='pinger')
    with lp.launch(program, launch_type='ssh',
                   resources={'pinger': ssh_host('h2', env={'LP_TEST_TOKEN': token})}):
        secret = auth.secret_for(pinger.address.resolve()).hex()
        processes = marked_processes(token)
        assert len(processes) >= 2  # The ssh client here and the node on h2.
        for process in processes:
            assert secret not in ' '.join(process.cmdline())
            assert all(secret not in value for value in process.environ().values())
        assert pinger.dereference().ping(1) == ('pong', 1)  # The node does hold it.


def test_node_ignoring_stop_is_killed_with_its_children_after_grace():
    """A node deaf to the stop is killed after the grace period, with what it started."""
    from ssh_nodes import ignore_stop_with_a_child
    token = f'lp-deaf-{uuid.uuid4().hex}'
    program = lp.Program('deaf')
    program.add_node(lp.PyNode(ignore_stop_with_a_child), label='deaf')
    controller = lp.launch(program, launch_type='ssh',
                           resources={'deaf': ssh_host('h3', env={'LP_TEST_TOKEN': token})})
    wait_for(lambda: len(marked_processes(token)) >= 3,
             what='the node and its child')  # With ssh.
    controller.stop(grace=1, timeout=30)
    assert controller.killed_nodes == ['deaf/0']
    assert controller.statuses()[0].state == lp.NodeState.KILLED
    _wait_until_gone(token, timeout=15)


def test_host_behind_a_jump_host_serves(tmp_path):
    """A host alias with ProxyJump (h2 through h1) works: the node still dials the launcher back."""
    config = tmp_path / 'ssh_config'
    with open(SSH_OPTIONS[1]) as base:
        config.write_text(base.read() + '\nHost h2-via-h1\n  HostName 10.250.0.12\n'
                          '  ProxyJump h1\n')
    program = lp.Program('jumped')
    pinger = program.add_node(lp.CourierNode(Pinger), label='pinger')
    host = lp.SshHost('h2-via-h1', ssh_options=['-F', str(config)])
    with lp.launch(program, launch_type='ssh', resources={'pinger': host}) as controller:
        assert pinger.dereference().ping('jumped') == ('pong', 'jumped')
        assert controller.statuses()[0].host == 'h2-via-h1'
        assert pinger.address.resolve().startswith('10.250.0.12:')


def test_output_to_files_keeps_each_node_log(capsys):
    """terminal='output_to_files' writes each remote node's output to its own log file here."""
    program = lp.Program('logged')
    program.add_node(lp.PyNode(print_gpus), label='printer')
    with lp.launch(program, launch_type='ssh', terminal='output_to_files',
                   resources={'printer': ssh_host('h1', gpus=[3])}):
        announced = capsys.readouterr().out
        (path,) = [line.split(': ', 1)[1] for line in announced.splitlines()
                   if line.startswith(f'  printer/0 ({host_name("h1")}): ')]

        def logged() -> bool:
            with open(path) as log:
                return 'CUDA_VISIBLE_DEVICES=3' in log.read()

        wait_for(logged, timeout=60, what='the node output in its log file')
    assert os.path.exists(path)  # Kept after the program ends, as under local_mp.


def test_flags_name_hosts_for_a_script_that_launches_without_resources():
    """--lp_launch_type=ssh --lp_ssh_hosts=... runs an unchanged script on those hosts."""
    done = subprocess.run(
        [sys.executable, '-m', 'examples.hello_world', '--lp_launch_type=ssh',
         '--lp_ssh_hosts=h3', f'--lp_ssh_options={" ".join(SSH_OPTIONS)}'],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "[greeter/0] Hello, world! (from node 'world')" in done.stdout
