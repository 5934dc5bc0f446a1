"""Entry point of a node process on another host:
``python -m launchpad_py.node_side.remote_node_main``.

Whatever started it gives it one JSON object: the launcher's control address
and key, the program secret, its worker id, how many addresses it must
bind (for a restarted node, also the ones it had: it takes them again where still
free, else others its clients follow), and which environment variable
names its host (``host_env``: a scheduler placed it; the name goes in its
hello). ssh and srun write it as one line on stdin; a pod, which has no stdin
from the launcher, reads it from the file that ``LAUNCHPAD_PY_BOOTSTRAP``
names (a mounted Kubernetes Secret). Secrets never appear on a command line.
Then, over the authenticated control channel (see ``launchers/remote/``)::

    node → launcher: ('hello', worker_id, pid, pgid, ['host:port', ...], host_name)
    launcher → node: ('run', program_name, executable_bytes, flags, args) | ('stop',)
    then the messages of ``node_process``, and ('ping',) from the launcher every second.
    Those the launcher sends at any time ('members', 'moved', 'metrics') may come before
    'run' too; only 'stop' calls the node's run off.

The node ends its whole process group when the control channel closes, when
the launcher's host stops answering for ``host_timeout`` seconds (TCP keepalive:
the kernels answer, so a launcher busy starting hundreds of nodes is not taken for
gone), when no heartbeat arrives for ``heartbeat_timeout`` seconds (a frozen
launcher; None for both: not watched, as a host agent that started it is pinged
for the whole host instead), or when its stdin
closes (the ssh connection dropped; not watched when the bootstrap came
from a file), so nothing outlives the launcher.
"""

from __future__ import annotations

import json
import multiprocessing.connection as mpc
import os
import random
import signal
import socket
import sys
import threading
import time

from launchpad_py.node_side import flag_transfer, node_process
from launchpad_py.node_side.reporting import node_logging
from launchpad_py.courier import serialization


def _kill_own_group(why: str = 'the launcher is gone') -> None:
    """Ends this node and everything it started, saying why on its output first."""
    try:
        os.write(2, f'launchpad_py remote node: {why}; ending the node\n'.encode())
        os.killpg(os.getpgrp(), signal.SIGKILL)
    finally:
        os._exit(1)


#: Names the file holding the bootstrap, for nodes whose stdin does not reach the launcher.
BOOTSTRAP_ENV = 'LAUNCHPAD_PY_BOOTSTRAP'


def _read_bootstrap_file(path: str) -> dict:
    try:
        with open(path, 'rb') as boot_file:
            return json.load(boot_file)
    except (OSError, ValueError) as exc:
        raise SystemExit(f'launchpad_py remote node: cannot read the bootstrap file {path!r} '
                         f'named by {BOOTSTRAP_ENV}: {exc}') from exc


def _read_bootstrap() -> dict:
    """The first line of stdin, read unbuffered so the watch below owns the rest."""
    line = b''
    while not line.endswith(b'\n'):
        chunk = os.read(0, 1)
        if not chunk:
            raise SystemExit('launchpad_py remote node: no bootstrap line on stdin')
        line += chunk
    return json.loads(line)


def _watch_stdin() -> None:
    """The starter's connection (ssh) closing means the launcher is gone."""
    while os.read(0, 4096):
        pass
    _kill_own_group('its stdin closed (the ssh session or host agent ended)')


def _local_ip(connection: mpc.Connection) -> str:
    """The address of our interface that reaches the launcher: other hosts reach us there too."""
    sock = socket.socket(fileno=os.dup(connection.fileno()))
    try:
        return sock.getsockname()[0]
    finally:
        sock.close()


def _watch_host(connection: mpc.Connection, seconds: float) -> None:
    """The connection fails (ETIMEDOUT) once the launcher's host has not answered for about
    ``seconds``: probes each second when idle (keepalive), and no more than ``seconds`` for
    data to be acknowledged. The launcher's kernel answers, not the launcher process, so
    a launcher that waits for a CPU or its GIL is not taken for gone."""
    sock = socket.socket(fileno=os.dup(connection.fileno()))
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, max(1, int(seconds) - 1))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(seconds * 1000))
    finally:
        sock.close()


def _free_range() -> range:
    """Ports below the kernel's ephemeral range: no bind(0) or outgoing connection takes them."""
    try:
        with open('/proc/sys/net/ipv4/ip_local_port_range') as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return range(10000, low) if low > 11000 else range(0)


def _hold_ports(host: str, count: int, before: list[str] | None = None) -> list[socket.socket]:
    """``count`` sockets bound to free ports of ``host``, held until the node's servers bind them.

    While held, no other node on the host can pick the same port; outside the
    ephemeral range, nothing but an explicit bind takes it in the moment between.
    ``before``: a restarted node's addresses, whose ports it takes again where still free
    (a port taken meanwhile is replaced by another: the node's clients follow it).
    """
    chosen: list[socket.socket] = []
    candidates = _free_range()
    try:
        while len(chosen) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            chosen.append(sock)
            if before and _bind_again(sock, host, before[len(chosen) - 1]):
                continue
            for _ in range(50 if candidates else 0):
                try:
                    sock.bind((host, random.choice(candidates)))
                    break
                except OSError:
                    continue
            else:
                sock.bind((host, 0))
        return chosen
    except BaseException:
        for sock in chosen:
            sock.close()
        raise


def _bind_again(sock: socket.socket, host: str, value: str) -> bool:
    """Binds ``sock`` to the port of ``value`` (a restart's old address) if still free."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # As its server will.
    try:
        sock.bind((host, int(value.rpartition(':')[2])))
        return True
    except OSError:
        return False


def main() -> int:
    boot_path = os.environ.get(BOOTSTRAP_ENV)
    boot = _read_bootstrap_file(boot_path) if boot_path else _read_bootstrap()
    if os.getpgrp() != os.getpid():
        os.setsid()  # Our own group, so ending it ends exactly this node and its children.
    if not boot_path:
        threading.Thread(target=_watch_stdin, name='lp-stdin', daemon=True).start()
    host, port = boot['control']
    connection = mpc.Client((host, port), family='AF_INET', authkey=bytes.fromhex(boot['key']))
    if boot.get('host_timeout'):
        _watch_host(connection, boot['host_timeout'])
    channel = HeartbeatChannel(connection, boot['heartbeat_timeout'])
    bind_host = _local_ip(connection)
    host_env = boot.get('host_env')
    # A restarted node serves where it did before if it can, so its clients find it at once.
    ports = _hold_ports(bind_host, boot['addresses'], boot.get('bind'))
    channel.send('hello', boot['worker_id'], os.getpid(), os.getpgrp(),
                 [f'{bind_host}:{sock.getsockname()[1]}' for sock in ports],
                 (os.environ.get(host_env) or socket.gethostname()) if host_env else None)
    try:
        message = channel.recv()
        # Only 'stop' calls the launch off. The rest may come before 'run' as after it: a
        # peer's pod evicted while the launch waits for another node sends 'moved' (every
        # node took that for a stop and ended: the coordinator then "failed to start").
        while message[0] not in ('run', 'stop'):
            node_process.answer(channel, message)
            message = channel.recv()
    except (EOFError, OSError) as exc:
        _kill_own_group(f'lost the launcher before running ({exc or type(exc).__name__})')
    if message[0] == 'stop':
        return 0  # The launch was called off before this node ran.
    _, program_name, data, flags, args = message

    def load():
        for sock in ports:  # The executable's servers bind them next.
            sock.close()
        executable = serialization.loads(data)
        setup = flag_transfer.restore(flags, args)
        node_logging.configure(setup, f'{executable.label}/{executable.index}')
        return executable

    # The launcher fixed every address before shipping us; we ask only where a peer that
    # moved (a restarted pod) serves now.
    return node_process.run(channel, program_name, bind_host, load,
                            lambda: _kill_own_group(channel.why_ended),
                            secret=bytes.fromhex(boot['secret']))


class HeartbeatChannel:
    """A channel whose ``recv`` raises EOFError once the launcher has been silent too long.

    A killed launcher's connection usually closes at once, but a host that
    vanishes from the network never says so: the heartbeat covers that.

    Silence is counted in ticks of this process's own clock, and a tick that fired
    late counts only as long as it should have taken: on a machine so overloaded that
    this process waits seconds for a CPU (hundreds of pods starting at once), the
    launcher's pings are late for the same reason, and a starved node must not blame
    its launcher for it. A launcher that is really gone still ends the node: its
    connection closes at once, or its silence adds up at the normal rate wherever this
    process gets to run.

        channel = HeartbeatChannel(connection, timeout=5.0)
        message = channel.recv()   # EOFError after 5 s of silence this process could watch
    """

    #: Ticks per timeout: how finely silence is counted.
    TICKS = 10
    #: A tick counts at most this many times its length, however late it fired.
    LATE_TICK_CREDIT = 1.5

    def __init__(self, connection: mpc.Connection, timeout: float | None):
        self._channel = node_process.Channel(connection)
        self._connection = connection
        self._timeout = timeout
        #: Why ``recv`` last failed: what the node says when it ends itself.
        self.why_ended = 'the control channel to the launcher closed'

    def send(self, *message) -> bool:
        return self._channel.send(*message)

    def recv(self):
        if self._timeout is not None and not self._heard_within(self._timeout):
            self.why_ended = f'no heartbeat from the launcher for {self._timeout:.0f}s'
            raise EOFError(self.why_ended)
        try:
            return self._connection.recv()
        except TimeoutError:  # ETIMEDOUT: the host watch (``_watch_host``) gave up.
            self.why_ended = "the launcher's host stopped answering"
            raise

    def _heard_within(self, timeout: float) -> bool:
        """Whether the launcher said something before ``timeout`` seconds of silence."""
        tick, silent = timeout / self.TICKS, 0.0
        while silent < timeout:
            started = time.monotonic()
            if self._connection.poll(tick):
                return True
            silent += min(time.monotonic() - started, tick * self.LATE_TICK_CREDIT)
        return False

    def close(self) -> None:
        self._channel.close()


if __name__ == '__main__':
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)
