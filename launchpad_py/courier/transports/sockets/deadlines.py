"""Times out calls whose futures have a deadline; one thread, only while a deadline is pending."""

from __future__ import annotations

import threading
import time

class Deadlines:
    """Calls ``owner.expire(call_id)`` at each deadline added; discarded ones never fire."""

    def __init__(self):
        self._entries: dict[tuple[int, int], tuple[float, object, int]] = {}
        self._cond = threading.Condition()
        self._running = False

    def add(self, deadline: float, owner: object, call_id: int) -> None:
        with self._cond:
            self._entries[(id(owner), call_id)] = (deadline, owner, call_id)
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, name='courier-deadlines', daemon=True).start()
            self._cond.notify()

    def discard(self, owner: object, call_id: int) -> None:
        with self._cond:
            if self._entries.pop((id(owner), call_id), None) is not None:
                self._cond.notify()

    def discard_all(self, owner: object) -> None:
        with self._cond:
            for key in [k for k in self._entries if k[0] == id(owner)]:
                del self._entries[key]
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                due = [k for k, (d, _, _) in self._entries.items() if d <= now]
                expired = [self._entries.pop(k) for k in due]
                if not self._entries and not expired:
                    self._running = False
                    return
                if not expired:
                    self._cond.wait(min(d for d, _, _ in self._entries.values()) - now)
            for _, owner, call_id in expired:
                owner.expire(call_id)


deadlines = Deadlines()
