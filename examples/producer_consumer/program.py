"""Producers serve ranges of numbers; a consumer fans out to them with futures.

    producer ─┐
    producer ─┼─ consumer   (the consumer calls every producer at once, then lp.stop())
"""

from __future__ import annotations

import launchpad_py as lp


class Range:
    """Produces the numbers ``[start, start + size)`` one chunk per call."""

    def __init__(self, start: int, size: int):
        self._start, self._size = start, size

    def chunk(self, index: int, chunk_size: int) -> list[int]:
        lo = self._start + index * chunk_size
        hi = min(lo + chunk_size, self._start + self._size)
        return list(range(lo, hi))


class Consumer:
    """Fetches every chunk from every producer concurrently and sums them."""

    def __init__(self, producers: list, size: int, chunk_size: int):
        self._producers, self._size, self._chunk_size = producers, size, chunk_size

    def run(self) -> None:
        chunks = -(-self._size // self._chunk_size)
        futures = [producer.futures.chunk(i, self._chunk_size)
                   for i in range(chunks) for producer in self._producers]
        total = sum(sum(f.result()) for f in futures)
        print(f'consumer: {len(futures)} chunks from {len(self._producers)} producers, '
              f'total = {total}', flush=True)
        lp.stop()


def make_program(num_producers: int = 2, size: int = 1000, chunk_size: int = 100) -> lp.Program:
    program = lp.Program('producer_consumer')
    with program.group('producer'):
        producers = [program.add_node(lp.CourierNode(Range, i * size, size))
                     for i in range(num_producers)]
    program.add_node(lp.PyClassNode(Consumer, producers, size, chunk_size), label='consumer')
    return program


def expected_total(num_producers: int = 2, size: int = 1000) -> int:
    return sum(range(num_producers * size))
