"""``Channel.post``: the stop asks hundreds of nodes from one thread and never waits on one.

Blocking sends took 9.5 s to ask 300 pods to stop (the supervisor thread handing the GIL
over and back on each), so every node was killed at the end of the 10 s grace period.
"""

import multiprocessing.connection as mpc
import threading

from launchpad_py.node_side import node_process

STOP = node_process.frame('stop')


def _pair():
    ours, theirs = mpc.Pipe()  # A socket pair on Linux, as the launcher's TCP channels are.
    return node_process.Channel(ours), theirs


def _returns_at_once(call) -> None:
    done = threading.Event()
    threading.Thread(target=lambda: (call(), done.set()), daemon=True).start()
    assert done.wait(10), 'post waited'


def test_post_of_more_than_the_socket_holds_returns_and_every_message_arrives_whole():
    """A message larger than the socket buffer, to a peer not reading yet: ``post`` returns
    at once (the rest goes on a thread), and so does a second ``post`` behind it; the peer
    then gets both, whole and in order."""
    channel, peer = _pair()
    big = b'x' * (16 << 20)
    _returns_at_once(lambda: channel.post(node_process.frame(big)))
    _returns_at_once(lambda: channel.post(STOP))
    assert peer.recv() == (big,)
    assert peer.recv() == ('stop',)


def test_post_while_another_send_holds_the_channel_waits_for_it_not_the_caller():
    """A post made while another thread sends goes after that send, on a thread of its own."""
    channel, peer = _pair()
    channel._lock.acquire()  # Another sender, mid-message.
    _returns_at_once(lambda: channel.post(STOP))
    assert not peer.poll(0.2)  # Nothing interleaves with the send in progress.
    channel._lock.release()
    assert peer.poll(10)
    assert peer.recv() == ('stop',)


def test_post_on_a_free_channel_sends_at_once():
    """The usual case: one non-blocking send, the message there before ``post`` returns."""
    channel, peer = _pair()
    channel.post(STOP)
    assert peer.poll(0) and peer.recv() == ('stop',)
    assert channel.send('after')  # The lock was given back.
    assert peer.recv() == ('after',)
