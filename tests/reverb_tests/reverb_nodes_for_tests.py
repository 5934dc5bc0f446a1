"""Tables and nodes for the ReverbNode tests, importable from node processes."""

from __future__ import annotations

import functools
import os

import numpy as np
import reverb

import launchpad_py as lp

TABLE = 'replay'


def make_tables():
    return [reverb.Table.queue(TABLE, max_size=100)]


def checkpointer(path):
    """A picklable checkpoint_ctor writing under ``path``."""
    return functools.partial(reverb.checkpointers.DefaultCheckpointer, path=path)


class InsertAndSample:
    """A node in its own process that writes to and reads from the replay node."""

    def __init__(self, replay):
        self._replay = replay

    def round_trip(self, values):
        for value in values:
            self._replay.insert([np.float32(value)], priorities={TABLE: 1.0})
        samples = self._replay.sample(TABLE, num_samples=len(values))
        return [float(sample[0].data[0]) for sample in samples], os.getpid()


def insert_then_stop(replay, count):
    """Inserts ``count`` items, then stops the whole program."""
    for value in range(count):
        replay.insert([np.float32(value)], priorities={TABLE: 1.0})
    lp.stop()
