"""Nodes of tests/test_open_files.py: one server, many connections to it at once."""

from __future__ import annotations

import concurrent.futures
import threading

import launchpad_py as lp


class Meeting:
    """``meet()`` returns once ``size`` callers are inside it at the same time."""

    def __init__(self, size, timeout=60):
        self._barrier = threading.Barrier(size, timeout=timeout)

    def meet(self):
        return self._barrier.wait() >= 0


def meet_all_at_once(meeting, size, result_path):
    """``size`` threads call ``meeting.meet()`` together: ``size`` connections open at once."""
    pool = concurrent.futures.ThreadPoolExecutor(size)
    try:
        met = list(pool.map(lambda _: meeting.meet(), range(size)))
    finally:  # On a failure the others' calls end when the program stops.
        pool.shutdown(wait=False, cancel_futures=True)
    with open(result_path, 'w') as result:
        result.write(str(sum(met)))
    lp.stop()


def meeting_program(size: int, result_path: str, timeout: float = 60) -> lp.Program:
    program = lp.Program('meeting')
    meeting = program.add_node(lp.CourierNode(Meeting, size, timeout,
                                              courier_kwargs={'thread_pool_size': size + 16}),
                               label='meeting')
    program.add_node(lp.PyNode(meet_all_at_once, meeting, size, result_path), label='callers')
    return program


def counters_program(nodes: int) -> lp.Program:
    program = lp.Program('many')
    for _ in range(nodes):
        program.add_node(lp.CourierNode(Meeting, 1), label='meeting')
    return program
