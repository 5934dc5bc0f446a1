"""One Ray actor shared by the nodes packed into it (``RayResources(nodes_per_actor=k)``).

Each node's ``RayStarter`` joins the share when it starts and leaves when its node is
over; the actor is made by the first to join and killed when the last leaves, so with
one node per actor this is exactly "one actor per node". A restarted node joins the
same share: while its actor lives it starts there again (same host, so the node keeps
its address); if the actor died (its host lost), the share makes a new one, pinned to
the Ray node the old one ran on where the launcher asks for that.
"""

from __future__ import annotations

import threading
from typing import Any, Callable


class SharedActor:
    """The actor of up to ``slots`` nodes. ``make_actor(pin)`` creates it (``pin``: a Ray
    node id it must land on, or None)."""

    def __init__(self, make_actor: Callable[[str | None], Any], slots: int = 1):
        self._make_actor, self.slots = make_actor, slots
        self._actor = None
        self._members: set[str] = set()
        self._lock = threading.Lock()

    def join(self, key: str, pin: str | None) -> Any:
        """The actor for node start ``key``, made now if there is none (or it died)."""
        with self._lock:
            if self._actor is None:
                self._actor = self._make_actor(pin)
            self._members.add(key)
            return self._actor

    def lost(self, actor: Any) -> None:
        """Ray says ``actor`` died: the next node to join gets a new one."""
        with self._lock:
            if self._actor is actor:
                self._actor = None

    def stop(self, key: str) -> bool:
        """Ends node start ``key`` from outside: its actor, when no other node lives in it."""
        with self._lock:
            actor, alone = self._actor, self._members <= {key}
            if actor is None or key not in self._members:
                return False
            if alone:  # A node joining after this gets a new actor.
                self._actor = None
        if alone:
            _kill(actor)
        else:
            try:
                actor.stop_node.remote(key)
            except Exception:  # The actor is gone already, and the node with it.
                pass
        return True

    def leave(self, key: str) -> None:
        """Node start ``key`` is over; the last to leave kills the actor."""
        with self._lock:
            self._members.discard(key)
            actor = self._actor if not self._members else None
            if actor is not None:
                self._actor = None
        if actor is not None:
            _kill(actor)


def _kill(actor: Any) -> None:
    import ray
    try:
        ray.kill(actor, no_restart=True)
    except Exception:  # Already gone, or Ray shut down: nothing left to kill.
        pass
