"""Word count as MapReduce: one mapper per file, R reducers, one output node.

    mapper_0 ─┐   words by hash   ┌─▶ reducer_0 ─┐
    mapper_1 ─┼──────────────────┼─▶ reducer_1 ─┼─▶ output ─▶ file
      …      ─┘                   └─▶ …         ─┘

A word is a whitespace-separated token (``str.split()``), counted as written.
Each mapper tells every reducer ``mapper_begin``, streams per-reducer counts
(a word always goes to reducer ``crc32(word) % R``), then ``mapper_done``;
a reducer that has heard ``mapper_done`` from every mapper hands its counts to
the output node, which writes ``word<TAB>count`` lines (most frequent first)
and ends the program.
"""

from __future__ import annotations

import collections
import threading
import zlib
from typing import Callable

import launchpad_py as lp
from examples.calls import results_or_none


def reducer_for(word: str, num_reducers: int) -> int:
    """Stable across processes and runs, unlike ``hash()`` of a string."""
    return zlib.crc32(word.encode('utf-8')) % num_reducers


def map_file(path: str, reducers: list, mapper_id: int, lines_per_batch: int = 2000) -> None:
    """A mapper: counts the words of ``path`` batch by batch and sends them to their reducers."""
    stop = lp.stop_event()
    if results_or_none([r.futures.mapper_begin(mapper_id) for r in reducers], stop) is None:
        return
    words = 0
    with open(path, encoding='utf-8', errors='replace') as f:
        while batch := f.readlines(lines_per_batch * 80):
            parts = [collections.Counter() for _ in reducers]
            for line in batch:
                for word in line.split():
                    parts[reducer_for(word, len(reducers))][word] += 1
                    words += 1
            sends = [r.futures.add_counts(mapper_id, dict(part))
                     for r, part in zip(reducers, parts) if part]
            if results_or_none(sends, stop) is None:
                return
    print(f'mapper {mapper_id}: {words} words from {path}', flush=True)
    results_or_none([r.futures.mapper_done(mapper_id) for r in reducers], stop)


def _wait_for(changed: threading.Condition, ready: Callable[[], bool],
              stop: threading.Event) -> bool:
    """With ``changed`` held: waits until ``ready()``; False if the program stops first."""
    while not ready():
        if stop.is_set():
            return False
        changed.wait(0.5)  # Wakes on notify; the timeout only lets it notice a stop.
    return True


class Reducer:
    """Sums the counts of its share of the words; reports once every mapper is done."""

    def __init__(self, index: int, num_mappers: int, output):
        self._index, self._num_mappers, self._output = index, num_mappers, output
        self._counts: collections.Counter = collections.Counter()
        self._begun: set[int] = set()
        self._done: set[int] = set()
        self._changed = threading.Condition()

    def mapper_begin(self, mapper_id: int) -> None:
        with self._changed:
            self._begun.add(mapper_id)

    def add_counts(self, mapper_id: int, counts: dict[str, int]) -> None:
        with self._changed:
            if mapper_id not in self._begun or mapper_id in self._done:
                raise ValueError(f'reducer {self._index}: counts from mapper {mapper_id} outside '
                                 'its mapper_begin/mapper_done; call mapper_begin first')
            self._counts.update(counts)

    def mapper_done(self, mapper_id: int) -> None:
        with self._changed:
            self._done.add(mapper_id)
            self._changed.notify_all()

    def run(self) -> None:
        stop = lp.stop_event()
        with self._changed:
            if not _wait_for(self._changed, lambda: len(self._done) == self._num_mappers, stop):
                return
            counts = dict(self._counts)
        print(f'reducer {self._index}: all {self._num_mappers} mappers done, '
              f'{len(counts)} distinct words', flush=True)
        results_or_none([self._output.futures.reducer_done(self._index, counts)], stop)


class Output:
    """Merges the reducers' disjoint counts, writes the result file, ends the program."""

    def __init__(self, num_reducers: int, path: str):
        self._num_reducers, self._path = num_reducers, path
        self._parts: dict[int, dict[str, int]] = {}
        self._changed = threading.Condition()

    def reducer_done(self, index: int, counts: dict[str, int]) -> None:
        with self._changed:
            self._parts[index] = counts
            self._changed.notify_all()

    def run(self) -> None:
        with self._changed:
            if not _wait_for(self._changed, lambda: len(self._parts) == self._num_reducers,
                             lp.stop_event()):
                return
        total: dict[str, int] = {}
        for counts in self._parts.values():
            total.update(counts)  # Each word lives in exactly one reducer.
        ranked = sorted(total.items(), key=lambda item: (-item[1], item[0]))
        with open(self._path, 'w', encoding='utf-8') as f:
            f.writelines(f'{word}\t{count}\n' for word, count in ranked)
        top = ', '.join(f'{word} ({count})' for word, count in ranked[:5])
        print(f'output: {len(ranked)} distinct words, {sum(total.values())} in all, written to '
              f'{self._path}; most frequent: {top}', flush=True)
        lp.stop()


def make_program(paths: list[str], output_path: str, num_reducers: int = 2) -> lp.Program:
    if not paths:
        raise ValueError('mapreduce needs at least one input file (got an empty list)')
    if num_reducers < 1:
        raise ValueError(f'num_reducers must be at least 1 (got {num_reducers})')
    program = lp.Program('mapreduce')
    output = program.add_node(lp.CourierNode(Output, num_reducers, output_path), label='output')
    with program.group('reducer'):
        reducers = [program.add_node(lp.CourierNode(Reducer, i, len(paths), output))
                    for i in range(num_reducers)]
    with program.group('mapper'):
        for mapper_id, path in enumerate(paths):
            program.add_node(lp.PyNode(map_file, path, reducers, mapper_id))
    return program


def read_counts(path: str) -> dict[str, int]:
    """Reads an output file back into ``{word: count}``."""
    with open(path, encoding='utf-8') as f:
        return {word: int(count) for word, count in (line.rstrip('\n').split('\t') for line in f)}
