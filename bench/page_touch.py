"""What a fresh page costs on this machine, by how much memory is already in use.

    python -m bench.page_touch --gib 13

Maps ``--gib`` GiB of anonymous memory and writes one byte to each 4 KiB page, one GiB at a
time, printing the wall and CPU seconds of each GiB and the machine's free memory at the end.
On the shared 2-core VM of stop 43 the first ~11 GiB cost 0.55-0.65 s each and every GiB
beyond (less than ~6 GiB left free) 2.1-3.2 s: five times as much, in the kernel of whoever
touches the page (a node's copy-on-write faults, page zeroing), with no reclaim in the guest.
A launch whose nodes together write past that point pays it in its last nodes.
"""

from __future__ import annotations

import argparse
import json
import mmap
import time

import psutil


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--gib', type=int, default=13)
    args = parser.parse_args()
    used_at_start = psutil.virtual_memory().used / 2**30
    memory = mmap.mmap(-1, args.gib << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    per_gib = []
    for gib in range(args.gib):
        wall, cpu = time.perf_counter(), time.process_time()
        for offset in range(gib << 30, (gib + 1) << 30, mmap.PAGESIZE):
            memory[offset] = 1
        per_gib.append({'wall_s': round(time.perf_counter() - wall, 2),
                        'cpu_s': round(time.process_time() - cpu, 2)})
    print(json.dumps({'used_gib_at_start': round(used_at_start, 2),
                      'free_gib_at_end': round(psutil.virtual_memory().free / 2**30, 2),
                      'per_gib': per_gib}))


if __name__ == '__main__':
    main()
