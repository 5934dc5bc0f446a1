"""What a group handle's member tables cost to send while N members become ready.

    python -m bench.group_tables --json bench/group_tables.json

A launch of N members of a group that has a handle, and one node that uses
the handle, driven through the controller's own parts: ``Membership`` (the
live members, versioned) and each worker's ``MembersOverChannel`` (which
tables go to its node), with channels that count instead of sending. Each
member becoming ready publishes a new table. Measured: messages and member
entries sent in all, and the launching process's CPU for it, when only the
node that uses the handle asks for its tables (``watch``, as now) and when
every node gets every table (as before).
"""

from __future__ import annotations

import argparse
import json
import platform
import threading
import time

import launchpad_py as lp
from bench.sim_workers import Peer
from launchpad_py.supervision.membership import Membership
from launchpad_py.supervision.worker import MembersOverChannel, NodeState


class _CountingChannel:
    def __init__(self):
        self.messages = self.entries = 0

    def send(self, kind: str, table: dict) -> None:
        self.messages += 1
        self.entries += sum(len(members) for _, members in table.values())


class _Node(MembersOverChannel):
    """The parts of a worker that membership and the table sending read."""

    def __init__(self, label: str, index: int):
        self.label, self.index, self.name = label, index, f'{label}/{index}'
        self.state, self.retired, self.removing = NodeState.STARTING, False, False
        self._lock, self._channel = threading.Lock(), _CountingChannel()


def one(members: int, everyone_watches: bool) -> dict:
    program = lp.Program(f'tables_{members}')
    with program.group('member'):
        for _ in range(members):
            program.add_node(lp.CourierNode(Peer))
    token = program.group_handle('member').token
    program.add_node(lp.CourierNode(Peer, program.group_handle('member')), label='user')
    membership = Membership(program)
    nodes = [_Node('member', i) for i in range(members)] + [_Node('user', 0)]
    for node in nodes if everyone_watches else nodes[-1:]:
        node.watch_members(token)
    started = time.process_time()
    for node in nodes:
        node.state = NodeState.RUNNING
        table = membership.update(nodes)
        if table is not None:
            for each in nodes:
                each.send_members(table)
    cpu = time.process_time() - started
    return {'members': members, 'every_node_gets_every_table': everyone_watches,
            'messages': sum(n._channel.messages for n in nodes),
            'member_entries_sent': sum(n._channel.entries for n in nodes),
            'launcher_cpu_s': round(cpu, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--sizes', default='100,300,1000')
    parser.add_argument('--json')
    args = parser.parse_args()
    rows = [one(n, everyone) for n in map(int, args.sizes.split(','))
            for everyone in (True, False)]
    for row in rows:
        print(row)
    if args.json:
        with open(args.json, 'w') as out:
            json.dump({'machine': platform.node(), 'python': platform.python_version(),
                       'rows': rows}, out, indent=1)


if __name__ == '__main__':
    main()
