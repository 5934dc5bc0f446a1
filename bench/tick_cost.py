"""CPU per tick of the courier watchdog's two ways to wait a millisecond (issue 29).

Run from the repository root::

    python -m bench.tick_cost            # three pairs of 2,000 ticks each

The watchdog (``courier/transports/sockets/reader_handover.py``) ticks every
millisecond while a reader runs a call, so a tick's CPU is paid a thousand times
a second on a busy server. A condition's timed wait makes and drops a lock and a
waiter entry in Python per tick; ``time.sleep`` does not. This prints the
thread CPU (user + kernel, ``time.thread_time``) per tick of each, interleaved.
"""

from __future__ import annotations

import argparse
import os
import threading
import time

TICK = 0.001


def condition_ticks(n: int) -> float:
    condition = threading.Condition()
    start = time.thread_time()
    for _ in range(n):
        with condition:
            condition.wait(TICK)
    return (time.thread_time() - start) / n * 1e6


def sleep_ticks(n: int) -> float:
    start = time.thread_time()
    for _ in range(n):
        time.sleep(TICK)
    return (time.thread_time() - start) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--ticks', type=int, default=2000)
    parser.add_argument('--pairs', type=int, default=3)
    args = parser.parse_args()
    print(f'load average {os.getloadavg()[0]:.1f} at start')
    for _ in range(args.pairs):
        print(f'Condition.wait {condition_ticks(args.ticks):5.1f} µs per tick   '
              f'time.sleep {sleep_ticks(args.ticks):5.1f} µs per tick')
    print(f'load average {os.getloadavg()[0]:.1f} at end')


if __name__ == '__main__':
    main()
