"""Nodes, a fake-cluster fixture helper and a launching script for the Kubernetes launcher tests."""

from __future__ import annotations

import json
import os
import sys

import launchpad_py as lp
from fake_kube import IMAGE

#: The launcher's address on the namespace hosts' bridge, which fake pods on h1..h3 reach.
LAUNCHER_ADDRESS = '10.250.0.1'


def options(**extra) -> dict:
    """kubernetes_options for a fake cluster whose pods run on the namespace hosts."""
    return {'launcher_address': LAUNCHER_ADDRESS, **extra}


def image_for_every_group(program: lp.Program, **fields) -> dict:
    return {group: lp.KubernetesResources(image=IMAGE, **fields) for group in program.groups}


def print_then_crash(code: int) -> None:
    """Prints a line, then ends its process at once, as a crashing container does."""
    print('about to crash hard', flush=True)
    os._exit(code)


def ignore_stop() -> None:
    """Never looks at the stop request: only deleting its pod ends it."""
    import threading
    threading.Event().wait()


def note_stop_then_ignore_it(path: str) -> None:
    """Writes ``path`` when the stop request arrives, then goes on as if it had not."""
    import threading
    lp.register_stop_handler(lambda: open(path, 'w').close())
    threading.Event().wait()


def print_and_wait(text: str) -> None:
    print(text, flush=True)
    lp.wait_for_stop()


class Movable:
    """Says who and where it is; ``crash`` ends its pod's process in the middle of a call."""

    def who(self) -> dict:
        context = lp.get_node_context()
        return {'name': f'{context.label}/{context.index}', 'pid': os.getpid()}

    def crash(self) -> None:
        os._exit(3)


class PeerCaller:
    """Calls its peer until it answers, counting the calls lost on the way (a peer that moved)."""

    def __init__(self, peer):
        self._peer = peer

    def peer_who(self, attempts: int = 5) -> dict:
        from launchpad_py import courier
        lost = 0
        for _ in range(attempts):
            try:
                return {'who': self._peer.who(), 'lost': lost}
            except courier.CourierUnavailableError:
                lost += 1
        return {'who': None, 'lost': lost}


if __name__ == '__main__':  # A launcher to SIGKILL: prints its pods' names once ready, then waits.
    # argv: the lease in seconds; optionally N: N pingers, packed N per pod (so is the waiter).
    from nodes_for_tests import Pinger
    per_pod = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    program = lp.Program('doomed')
    with program.group('pinger'):
        for _ in range(per_pod):
            program.add_node(lp.CourierNode(Pinger))
    program.add_node(lp.PyNode(print_and_wait, 'waiting'), label='waiter')
    controller = lp.launch(program, launch_type='kubernetes',
                           resources=image_for_every_group(program, nodes_per_pod=per_pod),
                           kubernetes_options=options(lease_seconds=int(sys.argv[1])))
    # One write: print() writes the line and its end apart, and a node's line can come between.
    sys.stdout.write(json.dumps([s.host for s in controller.statuses()]) + '\n')
    sys.stdout.flush()
    controller.wait()
