"""How long thousands of threads take to ``forget`` their listening sockets at once.

Each stopping courier server forgets its waiting listening sockets (three: gRPC, raw TCP,
Unix) on the process's one first-connection watcher (courier/transports/sockets/
first_connection.py). A ``local_mt`` program of 2,000 nodes stops them all at once, and a
lock shared by every forget queued ~2,000 threads behind one another past the grace
period. Here ``--threads`` threads each watch ``--sockets`` real listening sockets, wait
on one ``StopEvent`` (no convoy of its own), then forget and close them; ``--busy``
spinners hold the GIL in turn, as a stopping program's own work does. One process a point.

    python -m bench.forget_convoy --threads 2000 --busy 0,1,4 --json bench/forget_convoy.json
"""

from __future__ import annotations

import argparse
import json
import socket
import threading
import time

from bench.stop_convoy import point_in_own_process, time_release, write_results


def _one(threads: int, sockets: int, busy: int) -> dict:
    """In this process: ``threads`` forgetters of ``sockets`` listeners each, ``busy`` spinners."""
    from launchpad_py.courier.transports.sockets import first_connection
    from launchpad_py.node_side.stop_event import StopEvent

    stop = StopEvent()
    ready, forgotten = [], []

    def node():
        listeners = [socket.create_server(('127.0.0.1', 0)) for _ in range(sockets)]
        for listener in listeners:
            first_connection.watch(listener.fileno(), lambda: None)
        ready.append(1)
        stop.wait()
        for listener in listeners:
            first_connection.forget(listener.fileno())
            listener.close()
        forgotten.append(time.perf_counter())

    nodes = [threading.Thread(target=node) for _ in range(threads)]
    for thread in nodes:
        thread.start()
    while len(ready) < threads or stop.waiting() < threads:
        time.sleep(0.01)
    all_forgotten_s = time_release(stop.set, busy, forgotten, threads)
    for thread in nodes:
        thread.join()
    watcher_left = [t.name for t in threading.enumerate()
                    if t.name == 'courier-grpc-first-connection']
    return {'threads': threads, 'sockets_each': sockets, 'busy_threads': busy,
            'all_forgotten_s': all_forgotten_s, 'forgotten': len(forgotten),
            'watcher_thread_left': bool(watcher_left)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--threads', type=int, default=2000)
    parser.add_argument('--sockets', type=int, default=3)
    parser.add_argument('--busy', default='0,1,4')
    parser.add_argument('--label', default='', help='what code this is (before/after)')
    parser.add_argument('--json')
    parser.add_argument('--one', nargs=3, help=argparse.SUPPRESS)  # threads sockets busy
    args = parser.parse_args()
    if args.one:
        print(json.dumps(_one(*(int(a) for a in args.one))))
        return
    points = []
    for busy in [int(b) for b in args.busy.split(',')]:
        point = point_in_own_process('bench.forget_convoy', args.threads, args.sockets, busy)
        points.append(point)
        print(f"{args.label} threads {args.threads} busy {busy}: all forgotten in "
              f"{point['all_forgotten_s']} s (load {point['load_average'][0]:.1f})", flush=True)
    if args.json:
        write_results(args.json, points, label=args.label)

if __name__ == '__main__':
    main()
