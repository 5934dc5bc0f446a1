"""Courier servers of one process stop a few at a time, unless the stops stop progressing.

2,000 local_mt nodes stopping their servers at once kept thousands of threads waiting for
the GIL together, and the launching process outlived its grace period
(bench/scale_2000_stop40a.json; courier/stop_gate.py).
"""

from __future__ import annotations

import threading

from launchpad_py import courier
from launchpad_py.courier import stop_gate
from launchpad_py.courier.transports import registry
from courier_test_nodes import Echo


def test_servers_stopping_at_once_stop_a_few_at_a_time(monkeypatch):
    """Forty servers stopped from forty threads at once: at most ``TURNS`` of them are
    closing their listeners at any moment (before, all forty were)."""
    servers = [courier.Server(Echo()).start() for _ in range(40)]
    inside, most, lock = [0], [0], threading.Lock()
    real_forget = registry.forget

    def counting_forget(host, port):  # The last step of a stop's turn.
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        try:
            real_forget(host, port)
            go.wait(0.05)  # Each stop lasts long enough for the others to pile up.
        finally:
            with lock:
                inside[0] -= 1

    go = threading.Event()
    monkeypatch.setattr(registry, 'forget', counting_forget)
    threads = [threading.Thread(target=server.stop) for server in servers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive()
    assert 1 <= most[0] <= stop_gate.TURNS


def test_a_stop_waits_only_while_others_finish():
    """A stop that finds every turn held by stops that wait themselves (for calls still
    running, say) goes ahead once no stop finished for the patience period."""
    gate = stop_gate.StopGate(turns=1, patience=0.2)
    holding, release = threading.Event(), threading.Event()

    def hold():
        with gate.turn():
            holding.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(10)
        entered = threading.Event()

        def go_ahead():
            with gate.turn():
                entered.set()

        other = threading.Thread(target=go_ahead)
        other.start()
        assert entered.wait(10), 'a stop waited for a turn held by a waiting stop'
        assert not release.is_set()  # It went ahead while the turn was still held.
        other.join(10)
    finally:
        release.set()
        holder.join(10)


def test_a_free_turn_is_taken_at_once():
    """With a turn free, a stop does not wait."""
    gate = stop_gate.StopGate(turns=2, patience=30)
    done = threading.Event()

    def stop():
        with gate.turn():
            with gate.turn():  # The second turn of two.
                done.set()

    thread = threading.Thread(target=stop)
    thread.start()
    assert done.wait(10)
    thread.join(10)
