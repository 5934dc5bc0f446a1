"""No full garbage collection while a launch is under way: their cost grew faster than nodes.

A launch makes a few hundred gc-tracked objects per node in the launching process (each
worker, its thread, channel and server objects; under ``local_mt`` the nodes themselves).
CPython walks every tracked object in a full collection, and starts one each time the
objects that outlived the young collections grow by a quarter of the heap: launching N
nodes paid several walks over a heap that itself grows with N. 2,000 ``local_mt`` nodes
took 5 full collections and 0.37 s of CPU (0.18 ms a node, 0.09 ms at 1,000 nodes;
docs/performance.md, "Flat per node?").

While a launch is under way in this process, ``paused()`` raises the third collection
threshold so that no full collection starts; young collections go on, so cycles made and
dropped during the launch are still freed. When the last launch under way returns (ready
or failed) the threshold is put back, and the next young collection runs the full one the
launch held back: once, instead of once per quarter of growth.

    with gc_pause.paused():
        controller = launcher(program, options)
"""

from __future__ import annotations

import contextlib
import gc
import threading
from typing import Iterator

#: The third threshold while launches are under way: more young collections than any launch makes.
PAUSED = 1 << 30

_lock = threading.Lock()
_under_way = 0
_saved = 10  # The third threshold to put back; read from gc when the first launch begins.


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No full collection in this process until every launch in it under way has returned.

    The program's own threshold is put back, unless it set another meanwhile (that one stays).
    """
    global _under_way, _saved
    with _lock:
        if _under_way == 0:
            first, second, _saved = gc.get_threshold()
            gc.set_threshold(first, second, PAUSED)
        _under_way += 1
    try:
        yield
    finally:
        with _lock:
            _under_way -= 1
            first, second, third = gc.get_threshold()
            if _under_way == 0 and third == PAUSED:
                gc.set_threshold(first, second, _saved)
