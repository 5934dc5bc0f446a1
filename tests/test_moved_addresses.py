"""Addresses that move: a restarted node that had to bind another port is found again.

The realistic cause here: the node's old port was taken while it was down, so its
restart binds another one and reports it; the launcher's book counts a new version
of the address, and a client whose call failed asks again and follows it.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import threading

import pytest

import launchpad_py as lp
from launchpad_py import courier, errors
from launchpad_py.program import address as address_module
from launchpad_py.supervision.launch_kit import address_book, program_secret
from conftest import launch, needs_ray, needs_ssh_hosts, ssh_host, wait_for
from restart_nodes import Caller, Member


@dataclasses.dataclass(frozen=True)
class _HeldRestart(lp.Restart):
    """``lp.Restart`` whose restart waits until the test has taken the dead node's port.

    The supervisor asks the policy for the backoff (``delay``) once the node has failed;
    here that answer waits for ``released``, so the restart cannot bind the old port first,
    however loaded the machine (a fixed 3 s backoff was only a safety margin for that race).
    """

    released: threading.Event = dataclasses.field(default_factory=threading.Event,
                                                  compare=False, repr=False)

    def delay(self, restarts_done, rng=None):
        # Bounded: a test that failed before releasing must not hang the program's stop.
        self.released.wait(60)
        return 0.0


def _state(controller, label='member'):
    return next(s for s in controller.statuses() if s.label == label)


def _take_port(value: str) -> socket.socket:
    """Listens on ``value``'s port as soon as its dead owner has let it go."""
    host, _, port = value.rpartition(':')

    def bind():
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, int(port)))
        except OSError:
            sock.close()
            return None
        sock.listen()
        return sock

    return wait_for(bind, what=f'port {port} to be free')


def _kill_and_take_its_port(controller, handle, pid, policy):
    """SIGKILLs the member, takes its port, lets it restart and waits until it serves again;
    the old address and the taken socket."""
    old = handle.address.resolve()
    os.kill(pid, signal.SIGKILL)
    try:
        taken = _take_port(old)
    finally:
        policy.released.set()
    wait_for(lambda: _state(controller).restarts == 1
             and _state(controller).state == lp.NodeState.RUNNING, what='the restart')
    return old, taken


@pytest.mark.parametrize('made_from', ['handle', 'string'])
def test_a_client_follows_a_restarted_node_to_its_new_port(made_from):
    """The call in flight fails unavailable; the next one reaches the node at its new port.
    Also for courier.Client('host:port') made from the node's address: the launching process
    knows every node's address, so that client follows too."""
    program = lp.Program(f'moves_{made_from}')
    handle = program.add_node(lp.CourierNode(Member), label='member')
    policy = _HeldRestart(max_restarts=3)
    with lp.launch(program, launch_type='test_mp', failure_policy={'member': policy}) as controller:
        client = (handle.dereference() if made_from == 'handle'
                  else courier.Client(handle.address.resolve()))
        pid = client.who()['pid']
        in_flight = client.futures.hold()
        wait_for(lambda: client.holding() == 1, what='the held call to arrive')
        old, taken = _kill_and_take_its_port(controller, handle, pid, policy)
        with taken:
            with pytest.raises(courier.CourierUnavailableError):
                in_flight.result(timeout=30)
            assert client.who()['pid'] == _state(controller).pid != pid
            assert client.address == handle.address.resolve() != old


def test_a_client_in_another_node_follows_it_too():
    """From inside a node: one failed call, then the member answers from its new port."""
    program = lp.Program('moves_in_node')
    member = program.add_node(lp.CourierNode(Member), label='member')
    caller = program.add_node(lp.CourierNode(Caller, member), label='caller')
    policy = _HeldRestart(max_restarts=3)
    with lp.launch(program, launch_type='test_mp', failure_policy={'member': policy}) as controller:
        client = caller.dereference()
        pid = client.who()
        in_flight = client.futures.hold()
        wait_for(lambda: member.dereference().holding() == 1, what="the caller's call to arrive")
        old, taken = _kill_and_take_its_port(controller, member, pid, policy)
        with taken:
            assert in_flight.result(timeout=30) == 'unavailable'
            assert client.who() == _state(controller).pid != pid
            assert member.address.resolve() != old


_TAKE_PORT = """
import socket, sys
host, port = sys.argv[1], int(sys.argv[2])
sock = socket.socket()
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    sock.bind((host, port))
except OSError:
    print('busy', flush=True)
    sys.exit(1)
sock.listen()
print('taken', flush=True)
sys.stdin.read()
"""


def _take_port_on_host(netns: str, value: str) -> subprocess.Popen:
    """A process in host ``netns`` that listens on ``value``'s port, once it is free."""
    host, _, port = value.rpartition(':')

    def take():
        taker = subprocess.Popen(['ip', 'netns', 'exec', netns, sys.executable, '-c', _TAKE_PORT,
                                  host, port], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True)
        if taker.stdout.readline().strip() == 'taken':
            return taker
        taker.wait()
        return None

    return wait_for(take, what=f'port {port} on {netns} to be free')


def _on_hosts(launch_type: str) -> dict:
    """Launch arguments putting the member on h2 and the caller on h1."""
    if launch_type == 'ssh':
        return {'resources': {'member': ssh_host('h2'), 'caller': ssh_host('h1')}}
    return {'resources': {'member': lp.RayResources(resources={'h2': 1}),
                          'caller': lp.RayResources(resources={'h1': 1})}}


@pytest.mark.parametrize('launch_type', [pytest.param('ssh', marks=needs_ssh_hosts),
                                         pytest.param('ray', marks=needs_ray)])
def test_remotely_a_restart_whose_port_was_taken_serves_on_another_and_is_found(launch_type):
    """ssh, ray: the killed node's port on its host is taken; its restart binds another port
    of the same host (under ray in the same actor), and a client in another node follows it
    after one failed call."""
    program = lp.Program(f'{launch_type}_moves')
    member = program.add_node(lp.CourierNode(Member), label='member')
    caller = program.add_node(lp.CourierNode(Caller, member), label='caller')
    policy = _HeldRestart(max_restarts=3)
    with launch(program, launch_type, failure_policy={'member': policy},
                **_on_hosts(launch_type)) as controller:
        client = caller.dereference()
        pid = client.who()
        in_flight = client.futures.hold()
        wait_for(lambda: member.dereference().holding() == 1, what="the caller's call to arrive")
        old = member.address.resolve()
        os.kill(pid, signal.SIGKILL)
        try:
            taker = _take_port_on_host('lp-h2', old)
        finally:
            policy.released.set()
        try:
            wait_for(lambda: _state(controller).restarts == 1
                     and _state(controller).state == lp.NodeState.RUNNING, what='the restart')
            assert in_flight.result(timeout=30) == 'unavailable'
            assert client.who() == _state(controller).pid != pid
            new = member.address.resolve()
            assert new != old and new.startswith('10.250.0.12:')
        finally:
            taker.stdin.close()
            taker.wait(timeout=30)


class _Described:
    """What the book reads of an executable: its addresses (one, unbound)."""

    def __init__(self):
        self.addresses = [address_module.Address()]


def _book_with_one_address(name):
    issued = program_secret.issue()
    book = address_book.AddressBook(name, issued, [])
    executable = _Described()
    book.expect([executable])
    return book, executable, executable.addresses[0].key


def test_the_book_counts_a_version_per_move_and_answers_relocations():
    """A report at another value is version 2; a withdrawn address is answered when back."""
    book, executable, key = _book_with_one_address('book')
    try:
        book.report({key: '127.0.0.1:1001'})
        assert book.version(key) == 1
        book.withdraw({key: '127.0.0.1:1001'})
        assert book.own(executable) == {key: '127.0.0.1:1001'}  # What its restart binds.
        answers = []
        done = threading.Event()
        book.relocate({key: '127.0.0.1:1001'},
                      lambda values, gone: (answers.append((values, gone)), done.set()))
        assert not done.wait(0.2)  # Down: no answer until it reports again.
        book.report({key: '127.0.0.1:1002'})
        assert done.wait(10)
        assert answers == [({key: '127.0.0.1:1002'}, {})]
        assert book.version(key) == 2
    finally:
        book.stop()
        book.finish()


def test_relocation_of_an_address_of_a_stopped_program_fails_with_its_reason():
    """A client asking again for a node of a program that stopped gets a clear refusal."""
    book, _, key = _book_with_one_address('stopped_prog')
    book.report({key: '127.0.0.1:1003'})
    book.withdraw({key: '127.0.0.1:1003'})
    book.stop()
    try:
        with pytest.raises(errors.NotRunningError, match='stopped_prog'):
            address_module.directory.relocate(key, '127.0.0.1:1003')
    finally:
        book.finish()


def test_a_client_whose_relocation_fails_raises_unavailable_naming_the_address():
    """The program's refusal reaches the caller as CourierUnavailableError, with the reason."""
    def gone(stale):
        raise errors.NotRunningError(f'program x stopped (was {stale})')

    client = courier.Client('127.0.0.1:1', relocate=gone)
    client._stale = True  # As after a call that failed unavailable.
    with pytest.raises(courier.CourierUnavailableError, match='127.0.0.1:1.*program x stopped'):
        client.who()
