"""The Ctrl-C handler posts to the supervisor's inbox from inside whatever the main thread does."""

from __future__ import annotations

import sys
import threading

from launchpad_py.supervision.worker import Events, StopRequested


def _post_with_a_nested_post_at_step(step: int) -> tuple[bool, int, list]:
    """Posts a stop request; at its ``step``-th Python-level step, posts another one.

    Returns whether the posts finished, how many steps the outer post took, and the inbox.
    """
    events = Events()
    steps = [0]

    def tracer(frame, event, arg):
        if event in ('call', 'line'):
            steps[0] += 1
            if steps[0] == step:
                sys.settrace(None)  # The nested post runs untraced, like a signal handler.
                events.stop_requested()
        return tracer

    def post() -> None:
        sys.settrace(tracer)
        try:
            events.stop_requested()
        finally:
            sys.settrace(None)

    poster = threading.Thread(target=post, daemon=True)
    poster.start()
    poster.join(timeout=5)
    if poster.is_alive():
        return False, steps[0], []  # Deadlocked: the inbox's lock is held for good.
    posted = []
    while not events.queue.empty():
        posted.append(events.queue.get_nowait())
    return True, steps[0], posted


def test_a_stop_request_nested_anywhere_inside_another_goes_through():
    """A second Ctrl-C whose handler runs in the middle of the first one's post does not deadlock.

    Python runs a signal handler between any two bytecodes of the main thread,
    so also inside ``Events.stop_requested``. A tracer stands in for the
    signal: each run nests the second post at the next Python-level step of
    the first, until every step was tried.
    """
    step = 1
    while True:
        finished, steps_taken, posted = _post_with_a_nested_post_at_step(step)
        assert finished, f'a stop request nested at step {step} of another deadlocked'
        if step > steps_taken:
            break
        assert posted == [StopRequested()] * 2
        step += 1
