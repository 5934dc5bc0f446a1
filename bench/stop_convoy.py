"""How long thousands of threads take to leave ``wait`` when a stop event is set.

A ``local_mt`` program's node threads wait on the program's stop event. With
``threading.Event`` each woken waiter re-takes the event's one lock, and while other
threads hold the GIL that queue drains slowly; ``StopEvent`` (node_side/stop_event.py)
hands each waiter a lock of its own. Both are measured side by side, in one process per
point, with 0, 1 and 4 busy threads holding the GIL in turn (what a stopping program's
own work does).

    python -m bench.stop_convoy --waiters 2000 --busy 0,1,4 --json bench/stop_convoy.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from typing import Callable


def time_release(release: Callable[[], None], busy: int, finished: list[float],
                 expected: int) -> float | None:
    """Seconds from ``release()`` until ``finished`` holds ``expected`` times (the latest of
    them), with ``busy`` spinners holding the GIL in turn throughout; None past 300 s."""
    done = threading.Event()

    def spin():
        while not done.is_set():
            sum(range(100))

    spinners = [threading.Thread(target=spin) for _ in range(busy)]
    for thread in spinners:
        thread.start()
    time.sleep(0.2)  # The spinners hold the GIL in turn before the release (bench only).
    start = time.perf_counter()
    release()
    while len(finished) < expected and time.perf_counter() - start < 300:
        time.sleep(0.005)
    done.set()
    for thread in spinners:
        thread.join()
    return max(finished) - start if len(finished) == expected else None


def _one(kind: str, waiters: int, busy: int) -> dict:
    """In this process: ``waiters`` threads on one event, ``busy`` spinners, then ``set``."""
    if kind == 'threading.Event':
        event = threading.Event()
        waiting = lambda: len(event._cond._waiters)  # noqa: E731 (a probe, bench only)
    else:
        from launchpad_py.node_side.stop_event import StopEvent
        event = StopEvent()
        waiting = event.waiting
    done = threading.Event()
    woken: list[float] = []

    def wait():
        event.wait()
        woken.append(time.perf_counter())
        done.wait()

    threads = [threading.Thread(target=wait) for _ in range(waiters)]
    for thread in threads:
        thread.start()
    while waiting() < waiters:
        time.sleep(0.01)
    all_woken_s = time_release(event.set, busy, woken, waiters)
    done.set()
    for thread in threads:
        thread.join()
    return {'event': kind, 'waiters': waiters, 'busy_threads': busy,
            'all_woken_s': all_woken_s, 'woken': len(woken)}


def point_in_own_process(module: str, *args) -> dict:
    """Runs ``python -m module --one args...`` and returns its JSON line, with the load."""
    out = subprocess.run([sys.executable, '-m', module, '--one', *map(str, args)],
                         check=True, capture_output=True, text=True).stdout
    point = json.loads(out)
    point['load_average'] = os.getloadavg()
    return point


def write_results(path: str, points: list[dict], **extra) -> None:
    """The points, with the commit, time, CPUs and command line, as JSON at ``path``."""
    commit = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True,
                            text=True).stdout.strip()
    with open(path, 'w') as f:
        json.dump({'commit': commit, **extra,
                   'when': time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime()),
                   'cpus': os.cpu_count(), 'command': ' '.join(sys.argv),
                   'points': points}, f, indent=1)
        f.write('\n')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--waiters', type=int, default=2000)
    parser.add_argument('--busy', default='0,1,4')
    parser.add_argument('--json')
    parser.add_argument('--one', nargs=3, help=argparse.SUPPRESS)  # kind waiters busy
    args = parser.parse_args()
    if args.one:
        print(json.dumps(_one(args.one[0], int(args.one[1]), int(args.one[2]))))
        return
    points = []
    for busy in [int(b) for b in args.busy.split(',')]:
        for kind in ('threading.Event', 'StopEvent'):
            point = point_in_own_process('bench.stop_convoy', kind, args.waiters, busy)
            points.append(point)
            print(f"{kind:16} waiters {point['waiters']} busy {busy}: all woken in "
                  f"{point['all_woken_s']} s", flush=True)
    if args.json:
        write_results(args.json, points)

if __name__ == '__main__':
    main()
