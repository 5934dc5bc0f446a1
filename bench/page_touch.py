"""What a fresh page costs on this machine, by how much memory is already in use.

    python -m bench.page_touch --gib 13

Maps ``--gib`` GiB of anonymous memory and writes one byte to each 4 KiB page, one GiB at a
time, printing the wall and CPU seconds of each GiB, the machine's free memory and page cache
before it, and what the kernel did meanwhile (``/proc/vmstat``: pages scanned and reclaimed by
kswapd and by the toucher itself, direct-reclaim and compaction stalls). On the shared 2-core
VM of stop 43 the first ~11 GiB cost 0.55-0.65 s each and every GiB beyond (less than ~6 GiB
left free) 2.1-3.2 s: five times as much, in the kernel of whoever touches the page (a node's
copy-on-write faults, page zeroing). Stop 44 read the counters: see docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import mmap
import time

import psutil

# What the kernel does to find a page when none is free: reclaim by kswapd or by the
# faulting task itself (direct), and compaction.
RECLAIM_COUNTERS = ('pgscan_kswapd', 'pgscan_direct', 'pgsteal_kswapd', 'pgsteal_direct',
                    'allocstall_normal', 'allocstall_movable', 'compact_stall')


def vmstat() -> dict[str, int]:
    """The reclaim counters of ``/proc/vmstat`` now."""
    with open('/proc/vmstat', encoding='ascii') as f:
        pairs = (line.split() for line in f)
        return {name: int(value) for name, value in pairs if name in RECLAIM_COUNTERS}


def memory_gib() -> dict[str, float]:
    """Free memory and page cache now, in GiB, as ``free`` shows them."""
    memory = psutil.virtual_memory()
    return {'free_gib': round(memory.free / 2**30, 2),
            'cache_gib': round((memory.cached + memory.buffers) / 2**30, 2)}


def warm(gib: float) -> dict:
    """Writes ``gib`` GiB of fresh anonymous memory, one byte per page, then frees it: the
    seconds it took and the GiB written.

    On this VM memory that has sat free for long costs 3-5 times as much to write as memory
    freed a moment ago (the hypervisor backs it again; docs/performance.md, stop 44), so a
    launch that needs more memory than the launches before it meets a step that has nothing
    to do with how it scales. ``bench.scale --warm_memory`` calls this before each local
    point, so that every size meets memory in the same state; the seconds it took show what
    the cold memory would have cost."""
    size = int(gib * 2**30) // mmap.PAGESIZE * mmap.PAGESIZE
    started = time.perf_counter()
    if size > 0:
        memory = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        try:
            for offset in range(0, size, mmap.PAGESIZE):
                memory[offset] = 1
        finally:
            memory.close()
    return {'gib': round(size / 2**30, 2), 'seconds': round(time.perf_counter() - started, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--gib', type=int, default=13)
    args = parser.parse_args()
    used_at_start = psutil.virtual_memory().used / 2**30
    memory = mmap.mmap(-1, args.gib << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    per_gib = []
    for gib in range(args.gib):
        before, counters = memory_gib(), vmstat()
        wall, cpu = time.perf_counter(), time.process_time()
        for offset in range(gib << 30, (gib + 1) << 30, mmap.PAGESIZE):
            memory[offset] = 1
        after = vmstat()
        per_gib.append({'wall_s': round(time.perf_counter() - wall, 2),
                        'cpu_s': round(time.process_time() - cpu, 2), **before,
                        **{name: after[name] - counters[name] for name in counters}})
    print(json.dumps({'used_gib_at_start': round(used_at_start, 2),
                      'free_gib_at_end': round(psutil.virtual_memory().free / 2**30, 2),
                      'per_gib': per_gib}))


if __name__ == '__main__':
    main()
