"""What a local_mp node writes by ready, split by mapping.

    python -m bench.node_pages --nodes 5 --json /tmp/node_pages.json

Launches N counters (``bench.scale``'s program without its caller) and, when ``lp.launch``
returns, reads each node's ``/proc/PID/smaps``: its private dirty pages are the memory it
wrote since its fork (copies of the fork server's pages, made on write, and new pages). Each
mapping is put in one class: the fork server's heap, Python's object arenas and other
anonymous mappings inherited from it (the same start address in the fork server), new
anonymous mappings (thread stacks, malloc's per-thread arenas, gRPC's), the data of
libpython, of gRPC's core (``cygrpc``) and of other libraries. Prints the mean KiB per class
and per node, and the node's threads by name.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import statistics
import sys

import launchpad_py as lp
from bench.scale_nodes import Counter


def mappings(pid: int) -> list[dict]:
    """Each mapping of ``pid``: start address, size, path and its private dirty KiB."""
    out: list[dict] = []
    with open(f'/proc/{pid}/smaps') as f:
        for line in f:
            first = line.split()
            if '-' in first[0] and not first[0].endswith(':'):
                start, end = (int(x, 16) for x in first[0].split('-'))
                out.append({'start': start, 'kib': (end - start) >> 10, 'perms': first[1],
                            'path': first[5] if len(first) > 5 else '', 'dirty': 0})
            elif first[0] == 'Private_Dirty:':
                out[-1]['dirty'] = int(first[1])
    return out


def kind(mapping: dict, inherited: set[int]) -> str:
    """The class of one mapping (see the module's docstring)."""
    path = mapping['path']
    if path == '[heap]':
        return 'heap (inherited)'
    if path.startswith('['):
        return path
    if path:
        name = os.path.basename(path)
        for library in ('libpython', 'cygrpc', '_multiarray_umath', 'libc.so', 'ld-linux'):
            if library in name:
                return f'{library} data'
        return 'python binary' if name.startswith('python') else 'other libraries data'
    if mapping['start'] in inherited:
        return 'anonymous inherited (arenas)'
    return 'anonymous new (stacks, malloc arenas)'


def split(pid: int, inherited: set[int]) -> dict[str, int]:
    """Private dirty KiB of ``pid`` by class."""
    by_kind: dict[str, int] = collections.Counter()
    for mapping in mappings(pid):
        by_kind[kind(mapping, inherited)] += mapping['dirty']
    return dict(by_kind)


def thread_names(pid: int) -> list[str]:
    names = []
    for task in os.listdir(f'/proc/{pid}/task'):
        with open(f'/proc/{pid}/task/{task}/comm') as f:
            names.append(f.read().strip())
    return sorted(names)


def new_anonymous(pid: int, inherited: set[int]) -> list[dict]:
    """The node's new anonymous mappings, largest writers first."""
    new = [m for m in mappings(pid) if not m['path'] and m['start'] not in inherited]
    return sorted(new, key=lambda m: -m['dirty'])


def measure(nodes: int) -> dict:
    program = lp.Program(f'node_pages_{nodes}')
    with program.group('counter'):
        for _ in range(nodes):
            program.add_node(lp.CourierNode(Counter))
    controller = lp.launch(program, launch_type='local_mp')
    try:
        pids = [status.pid for status in controller.statuses()]
        fork_server = int(open(f'/proc/{pids[0]}/stat').read().rsplit(')', 1)[1].split()[1])
        inherited = {m['start'] for m in mappings(fork_server)}
        splits = [split(pid, inherited) for pid in pids]
        threads = thread_names(pids[0])
        example = [{k: m[k] for k in ('kib', 'perms', 'dirty')}
                   for m in new_anonymous(pids[0], inherited)[:12]]
    finally:
        controller.stop()
        controller.wait(timeout=120)
    kinds = sorted({k for s in splits for k in s})
    mean = {k: round(statistics.fmean(s.get(k, 0) for s in splits)) for k in kinds}
    return {'nodes': nodes,
            'private_dirty_kib_per_node': round(statistics.fmean(sum(s.values()) for s in splits)),
            'by_class_kib': dict(sorted(mean.items(), key=lambda kv: -kv[1])),
            'threads': threads, 'new_anonymous_of_one_node': example}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--nodes', type=int, default=5)
    parser.add_argument('--json')
    args = parser.parse_args()
    result = {'command': sys.argv[1:], **measure(args.nodes)}
    print(json.dumps(result, indent=1))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == '__main__':
    main()
