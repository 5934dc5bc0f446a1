"""Connection resets for the ssh launcher's fault runs: ``ss -K`` inside a namespace host.

The kernel here destroys sockets on request (``CONFIG_INET_DIAG_DESTROY``):
``ss -K`` with a filter naming both ends closes exactly one connection and
sends its peer a reset, as a dropped NAT entry or a rebooted switch would.
Each namespace host is reached with ``nsenter --net=/proc/PID/ns/net``.

A node process has three kinds of TCP connection to lose:

* ``control``: its control channel to the launcher (the node then ends itself);
* ``ssh``: the ssh session that started it, cut on the host's sshd side
  (its stdin closes, and it ends itself);
* ``courier``: a connection to or from another node (calls on it fail and are retried).
"""

from __future__ import annotations

import collections
import os
import random
import socket
import struct
import subprocess

import psutil

Connection = collections.namedtuple('Connection', 'laddr raddr')
Endpoint = collections.namedtuple('Endpoint', 'ip port')
_ESTABLISHED = '01'


def _endpoint(text: str) -> Endpoint:
    """``'0100007F:1F90'`` (as /proc/net/tcp writes an IPv4 end) -> ('127.0.0.1', 8080)."""
    address, port = text.split(':')
    return Endpoint(socket.inet_ntoa(struct.pack('<I', int(address, 16))), int(port, 16))


def _established(process: psutil.Process) -> list[Connection]:
    """The process's established TCP connections, read in its own network namespace.

    (psutil matches sockets against the caller's namespace, so it finds none of a
    process on a namespace host.)
    """
    try:
        inodes = set()
        for fd in os.listdir(f'/proc/{process.pid}/fd'):
            target = os.readlink(f'/proc/{process.pid}/fd/{fd}')
            if target.startswith('socket:['):
                inodes.add(target[8:-1])
        with open(f'/proc/{process.pid}/net/tcp') as table:
            rows = [line.split() for line in table.readlines()[1:]]
    except OSError:  # It ended while we looked.
        return []
    return [Connection(_endpoint(row[1]), _endpoint(row[2])) for row in rows
            if row[3] == _ESTABLISHED and row[9] in inodes]


def _ssh_session(process: psutil.Process):
    """The host's sshd process serving the session this node was started in, and its socket."""
    try:
        for parent in process.parents():
            if parent.name() == 'sshd':
                links = [c for c in _established(parent) if c.laddr.port == 22]
                if links:
                    return parent, links[0]
    except psutil.NoSuchProcess:
        pass
    return None


def choices(pid: int, launcher_ip: str, rng: random.Random) -> dict[str, tuple[int, object]]:
    """One connection of each kind node process ``pid`` has now: kind -> (owner pid, conn)."""
    try:
        process = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return {}
    found: dict[str, list] = {'control': [], 'courier': []}
    for connection in _established(process):
        kind = 'control' if connection.raddr.ip == launcher_ip else 'courier'
        found[kind].append((pid, connection))
    session = _ssh_session(process)
    if session is not None:
        found['ssh'] = [(session[0].pid, session[1])]
    return {kind: rng.choice(links) for kind, links in found.items() if links}


def reset(owner_pid: int, connection) -> bool:
    """Destroys one connection in the network namespace of ``owner_pid``; whether it worked."""
    local, remote = connection.laddr, connection.raddr
    command = ['nsenter', f'--net=/proc/{owner_pid}/ns/net', 'ss', '-K', '-t',
               'src', local.ip, 'sport', '=', f':{local.port}',
               'dst', remote.ip, 'dport', '=', f':{remote.port}']
    done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    # ss lists the sockets it closed after its header line.
    return done.returncode == 0 and len(done.stdout.strip().splitlines()) > 1
