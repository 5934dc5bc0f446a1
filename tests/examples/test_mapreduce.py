"""The MapReduce example counts words exactly as collections.Counter does."""

from __future__ import annotations

import collections

import numpy as np
import pytest

import launchpad_py as lp
from examples.mapreduce.program import make_program, read_counts

_VOCABULARY = ['the', 'The', 'node', 'nodes', 'learner,', 'actor.', 'λ', 'straße', '42', '—', 'a']


def _write_inputs(directory, count: int) -> list[str]:
    """``count`` files of seeded random words; the first is large enough to need several batches."""
    rng = np.random.default_rng(count)
    paths = []
    for index in range(count):
        lines = 30_000 if index == 0 else int(rng.integers(1, 400))
        words = rng.choice(_VOCABULARY + [f'w{index}_{n}' for n in range(50)], size=(lines, 6))
        text = '\n'.join(' '.join(row[: rng.integers(0, 7)]) for row in words)
        path = directory / f'input_{index}.txt'
        path.write_text(text + '\n\t  \n', encoding='utf-8')
        paths.append(str(path))
    return paths


@pytest.mark.parametrize('launch_type, num_mappers, num_reducers',
                         [('test_mt', 1, 1), ('test_mt', 4, 3), ('test_mp', 3, 2)])
def test_counts_match_counter(tmp_path, launch_type, num_mappers, num_reducers):
    """Mappers × reducers produce the same counts as Counter over the same files."""
    paths = _write_inputs(tmp_path, num_mappers)
    output = str(tmp_path / 'counts.tsv')
    lp.launch(make_program(paths, output, num_reducers), launch_type=launch_type).wait(timeout=60)
    expected = collections.Counter()
    for path in paths:
        with open(path, encoding='utf-8') as f:
            expected.update(f.read().split())
    assert read_counts(output) == dict(expected)
