"""Failing fast on servers that are gone, for whoever shuts a system of servers down.

A call normally waits for its server to come up (``wait_for_ready``), which
is what a starting system needs. While a system stops, its servers go away
one by one, and a call to one that is already gone would wait forever::

    end = courier.fail_fast_on_unavailable(['127.0.0.1:5000'])  # None: every server
    ...   # calls to those servers that cannot be reached now raise at once
    end()

While a rule covers an address, a call to it whose server cannot be reached
raises ``CourierUnavailableError`` instead of waiting, and calls already
waiting for it fail within a poll interval; calls to servers that are up are
untouched. Calls over the same-host socket need nothing here (a stopped
server closes its connections, and a missing socket sends the call to gRPC).

For gRPC: a channel in ``TRANSIENT_FAILURE`` has no connection, so the only
calls on it are calls waiting for one; closing it fails exactly those. The
client makes a fresh channel for its next call and sends it without waiting.
gRPC's own state subscriptions race with ``close()`` (their poller raises on
a closed channel), so one thread of ours polls the covered channels instead,
and only while some rule is in force.
"""

from __future__ import annotations

import threading
import weakref
from typing import Callable, Iterable

POLL_SECONDS = 0.05
#: ``grpc.ChannelConnectivity``'s numbers, which ``state`` reads; named here so that this
#: module (loaded by every ``launchpad_py`` import) does not load gRPC.
READY, TRANSIENT_FAILURE = 2, 3

# Each rule: (its addresses, None for every server; why they are gone, None if not said).
_rules: list[tuple[frozenset[str] | None, str | None]] = []
_cond = threading.Condition()
_polling = False
# address -> (channel, the function that drops it from the client's cache).
_channels: dict[str, tuple[grpc.Channel, Callable[[], None]]] = {}
_closed: weakref.WeakSet = weakref.WeakSet()


def fail_fast_on_unavailable(addresses: Iterable[str] | None = None,
                             why: str | None = None) -> Callable[[], None]:
    """Calls to ``addresses`` (every server when None) fail at once when unreachable.

    ``why``: why those servers are gone, for the errors (e.g. a node that left
    its group for good). Returns the function that ends this rule; rules add
    up, so ending one leaves the others in force.
    """
    global _polling
    covered = None if addresses is None else frozenset(addresses)
    if covered == frozenset():
        return lambda: None
    rule = (covered, why)
    with _cond:
        _rules.append(rule)
        if not _polling:
            _polling = True
            threading.Thread(target=_poll, name='courier-fail-fast', daemon=True).start()
    ended = []

    def end() -> None:
        with _cond:
            if not ended:
                ended.append(True)
                _rules.remove(rule)
                _cond.notify_all()

    return end


def applies(address: str) -> bool:
    """Whether a call to ``address`` must not wait for its server now."""
    rules = _rules
    return bool(rules) and any(covered is None or address in covered for covered, _ in rules)


def reason(address: str) -> str | None:
    """Why the server at ``address`` is gone, as a rule that covers it says (None: unsaid)."""
    return next((why for covered, why in list(_rules)
                 if why is not None and (covered is None or address in covered)), None)


def track_grpc_channel(address: str, channel: grpc.Channel, forget: Callable[[], None]) -> None:
    """Registers a cached channel; ``forget`` drops it from the cache when it is closed here."""
    with _cond:
        _channels[address] = (channel, forget)


def closed_here(channel: grpc.Channel) -> bool:
    """True when this module closed ``channel``: its cancelled calls mean 'server unavailable'."""
    return channel in _closed


def _poll() -> None:
    global _polling
    while True:
        with _cond:
            if not _rules:
                _polling = False
                return
            gone = [(address, entry) for address, entry in _channels.items()
                    if applies(address) and state(entry[0]) == TRANSIENT_FAILURE]
            for address, (channel, _) in gone:
                del _channels[address]
                _closed.add(channel)
        for _, (channel, forget) in gone:  # Outside our lock: forget() takes the cache's.
            forget()
            channel.close()  # Fails the calls that wait for this server.
        with _cond:
            _cond.wait(POLL_SECONDS)


def state(channel: grpc.Channel) -> int | None:
    """The channel's connectivity without subscribing (gRPC has no public getter for it)."""
    try:
        return channel._channel.check_connectivity_state(False)
    except (AttributeError, ValueError):  # Another gRPC version, or closed: leave it be.
        return None
