"""A receiver keeps its mappings of the peer's shared-memory segments across frames.

Two real ``uds.Connection``s on a Unix socket pair, on each frame loop: the sender reuses a
segment once the receiver released it, and the receiver then maps it once, not per frame;
a segment is never written while arrays of a frame that carried it live; a sender's notice
that it closed a segment, and the cap, bound what the receiver keeps mapped.
"""

from __future__ import annotations

import collections
import gc
import os
import re
import socket

import numpy as np
import pytest
from frame_loops import loop  # noqa: F401 (the fixture)

from launchpad_py.courier import frames, shm
from launchpad_py.courier.transports import uds

SIZE = 1 << 20  # Above uds.SHM_MIN_BYTES: every array below travels in a segment.


@pytest.fixture
def pair(loop):
    """(sender, receiver): two Unix-socket connections, on the loop ``loop`` names."""
    left, right = socket.socketpair()
    sender, receiver = uds.Connection(left), uds.Connection(right)
    try:
        yield sender, receiver
    finally:
        sender.close()
        receiver.close()


def _send(sender, receiver, fill: int, source: np.ndarray | None = None) -> np.ndarray:
    """Sends an array of ``fill`` (written into ``source`` if given); returns the receiver's
    array (a view of the segment)."""
    if source is None:
        source = np.empty(SIZE, np.uint8)
    source.fill(fill)
    sender.send(1, frames.REQUEST, source)
    value = receiver.read().value()
    assert value.nbytes == SIZE
    return value


def _answer(sender, receiver) -> None:
    """A small reply, which carries the receiver's released ids (and the sender learns them)."""
    receiver.send(1, frames.REPLY, 'ok')
    assert sender.read().value() == 'ok'


def _courier_maps() -> collections.Counter:
    """Mappings of courier segments in this process, by memfd name (``courier-<id>``)."""
    with open('/proc/self/maps') as maps:
        return collections.Counter(re.findall(r'memfd:(courier-\d+)', maps.read()))


def _new(before: collections.Counter) -> collections.Counter:
    return collections.Counter({name: n for name, n in _courier_maps().items()
                                if name not in before})


def test_a_reused_segment_is_mapped_once_by_the_receiver(pair):
    """Five round trips reuse one segment: the receiver maps it once, and after the first
    its reads fault in no page again (mapped afresh, each read faulted the segment in)."""
    sender, receiver = pair
    source = np.zeros(SIZE, np.uint8)  # Faulted in once, here: the rounds count the segment's.
    faults = []
    for fill in range(5):
        before = _minor_faults()
        value = _send(sender, receiver, fill, source)
        assert int(value.min()) == int(value.max()) == fill  # Reads every page.
        faults.append(_minor_faults() - before)
        del value
        _answer(sender, receiver)
    # A fresh mapping's 256 pages read would fault at least 16 times (64 KiB fault-around).
    assert max(faults[1:]) < 8, faults
    stats = receiver.reader.segment_statistics()
    assert (stats['mapped'], stats['reused']) == (1, 4), stats


def _minor_faults() -> int:
    with open('/proc/self/stat') as stat:
        return int(stat.read().rsplit(')', 1)[1].split()[7])


def test_a_segment_is_not_written_while_arrays_of_its_frame_live(pair):
    """The first frame's array stays intact while later frames come: its segment is not
    reused until that array is garbage, and then it is (one more mapping, no more)."""
    sender, receiver = pair
    first = _send(sender, receiver, 1)
    _answer(sender, receiver)
    for fill in (2, 3, 4):
        later = _send(sender, receiver, fill)
        assert int(later.min()) == int(later.max()) == fill
        del later
        _answer(sender, receiver)
        assert int(first.min()) == int(first.max()) == 1
    del first
    _answer(sender, receiver)  # The release of the first's segment reaches the sender.
    for fill in (5, 6):
        value = _send(sender, receiver, fill)
        assert int(value.min()) == int(value.max()) == fill
        del value
        _answer(sender, receiver)
    stats = receiver.reader.segment_statistics()
    assert stats['mapped'] == 2 and stats['reused'] == 4, stats


def test_a_dropped_notice_unmaps_the_receivers_mapping(pair):
    """Three live arrays need three segments; released, the sender keeps two
    (``MAX_FREE_PER_SIZE``) and closes one, which then only the receiver's kept mapping
    holds, until the sender's next frame says so and the receiver lets it go."""
    assert shm.MAX_FREE_PER_SIZE == 2
    sender, receiver = pair
    before = _courier_maps()
    values = [_send(sender, receiver, fill) for fill in range(3)]
    assert sorted(_new(before).values()) == [2, 2, 2]  # Each mapped by sender and receiver.
    del values
    _answer(sender, receiver)  # Carries the three releases: the sender closes one segment.
    closed = [name for name, n in _new(before).items() if n == 1]
    assert len(closed) == 1 and sorted(_new(before).values()) == [1, 2, 2], _new(before)
    sender.send(2, frames.REQUEST, 'next')  # Carries the notice.
    assert receiver.read().value() == 'next'
    assert closed[0] not in _courier_maps()
    assert receiver.reader.segment_statistics()['kept'] == 2


def test_the_receiver_keeps_at_most_max_mappings(pair):
    """Ten live arrays take ten segments; the receiver keeps the newest eight mapped, and
    the two oldest go from this process's maps with their arrays (the sender still holds
    each once)."""
    sender, receiver = pair
    before = _courier_maps()
    values = [_send(sender, receiver, fill) for fill in range(10)]
    order = sorted(_new(before), key=lambda name: int(name.split('-')[1]))
    del values
    gc.collect()
    counts = _new(before)
    assert [counts[name] for name in order] == [1, 1] + [2] * 8, counts
    assert receiver.reader.segment_statistics()['kept'] == shm.MAX_MAPPINGS == 8


def test_a_kept_mapping_serves_only_the_same_file(tmp_path):
    """Same id and size but another memfd (its owner closed the first): mapped afresh, and
    the bytes read are the new file's, whatever the cache held."""
    mappings = shm.SegmentMappings(shm.ReleaseQueue())
    views = []
    for fill in (1, 2):
        fd = os.memfd_create('courier-test', os.MFD_CLOEXEC)
        os.write(fd, bytes([fill]) * 4096)
        views.append(mappings.view(fd, 4096, 42))
    assert bytes(views[0][:4]) == b'\x01' * 4 and bytes(views[1][:4]) == b'\x02' * 4
    assert mappings.statistics() == {'mapped': 2, 'reused': 0, 'kept': 1}


def test_the_release_waits_for_the_frames_last_view():
    """``released`` learns a segment's id once every view of that frame is gone, for each
    frame, also when two frames share one kept mapping."""
    released = shm.ReleaseQueue()
    mappings = shm.SegmentMappings(released)
    fd = os.memfd_create('courier-test', os.MFD_CLOEXEC)
    os.ftruncate(fd, 4096)
    first = mappings.view(os.dup(fd), 4096, 7)
    part = first[100:200]
    del first
    assert not released.ids
    second = mappings.view(fd, 4096, 7)
    del part
    assert list(released.ids) == [7]
    del second
    assert list(released.ids) == [7, 7]
    assert mappings.statistics()['reused'] == 1


def test_a_forgotten_mapping_lives_on_under_its_views():
    """``forget`` (a notice) drops the kept mapping, not the memory a live view reads."""
    mappings = shm.SegmentMappings(shm.ReleaseQueue())
    fd = os.memfd_create('courier-test', os.MFD_CLOEXEC)
    os.write(fd, b'\x05' * 4096)
    view = mappings.view(fd, 4096, 3)
    mappings.forget(3)
    gc.collect()
    assert mappings.statistics()['kept'] == 0 and bytes(view[4090:]) == b'\x05' * 6
