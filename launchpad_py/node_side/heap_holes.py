"""Takes the fork server's free malloc chunks before it forks, so that its children's
allocations go to fresh pages instead of copying the server's.

A child's ``malloc`` first reuses the free chunks it inherits: the holes that the server's
imports left all over its heap (~0.5 MiB in ~600 chunks). Each reuse makes the kernel copy a
whole 4 KiB page of the server's heap into the child (copy on write) for a few bytes written.
Once the server holds those chunks itself (and never writes or frees them), a child's
allocations come from the top of the heap, packed into pages of its own: a node forked by the
server then writes ~700 KiB less by ready (1,090 KiB of the heap instead of 1,780, measured
with ``bench/node_pages.py`` in stop 44).

glibc only (``mallinfo2``, glibc 2.33 and later); elsewhere ``take`` does nothing.

    heap_holes.take()  # in the fork server, after its imports, before its first fork
"""

from __future__ import annotations

import ctypes

#: glibc's largest size held by the per-thread cache (tcache), and how many of each it holds
#: by default (7; more is harmless: they then come from the bins).
_TCACHE_MAX, _TCACHE_COUNT = 1032, 16
#: The smallest request, which splits whatever free chunk malloc finds first.
_SMALL = 24
_ROUND = 256


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        'arena', 'ordblks', 'smblks', 'hblks', 'hblkhd', 'usmblks', 'fsmblks', 'uordblks',
        'fordblks', 'keepcost')]


def take(max_rounds: int = 8192) -> int:
    """Allocates, and keeps for good, every free chunk below the heap's top; the bytes taken.

    ``mallinfo2``'s ``fordblks`` (free bytes) less ``keepcost`` (the top chunk) is what is
    left in the bins. The smallest requests fit any chunk there, so malloc never takes them
    from the top while one is left; it stops when none is, or a round took nothing from the
    bins, or after ``max_rounds`` rounds (8 KiB each: 64 MiB, far more than imports leave).
    """
    try:
        libc = ctypes.CDLL(None)
        malloc, mallinfo2 = libc.malloc, libc.mallinfo2
    except (OSError, AttributeError):
        return 0
    malloc.restype, malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    mallinfo2.restype = _Mallinfo2

    def in_bins() -> int:
        info = mallinfo2()
        return info.fordblks - info.keepcost

    at_start = in_bins()
    # The cache is not in the bins and holds chunks of one size each: ask for each size.
    for size in range(16, _TCACHE_MAX + 1, 16):
        for _ in range(_TCACHE_COUNT):
            malloc(size)
    left = in_bins()
    for _ in range(max_rounds):
        if left < 2 * _SMALL:
            break
        for _ in range(_ROUND):
            malloc(_SMALL)
        left, before = in_bins(), left
        if left >= before:
            break
    return max(0, at_start - left)
