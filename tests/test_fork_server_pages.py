"""What a node forked by the fork server writes of the server's memory (stop 44).

Every page a forked node writes is a page the kernel copies for it (copy on write); 2,000
nodes at ~6.8 MiB each were 13 GiB, and the last of them started at a third of the speed of
the first on the shared VM (docs/performance.md, "Stop 44").
"""

from __future__ import annotations

import subprocess
import sys

import launchpad_py as lp
from conftest import REPO
from scale_nodes import Counter

_MIB = 1024


def _heap_private_dirty_kib(pid: int) -> int:
    """The KiB of the ``[heap]`` mapping that ``pid`` holds alone and has written."""
    dirty, in_heap = 0, False
    with open(f'/proc/{pid}/smaps') as smaps:
        for line in smaps:
            fields = line.split()
            if '-' in fields[0] and not fields[0].endswith(':'):
                in_heap = fields[-1] == '[heap]'
            elif in_heap and fields[0] == 'Private_Dirty:':
                dirty += int(fields[1])
    return dirty


def test_a_forked_node_copies_little_of_the_servers_heap():
    """A courier node forked by the server has copied at most 1.4 MiB of its heap by ready.

    Its mallocs reused the free chunks left in the server's heap, each a 4 KiB page copied
    for a few bytes: 1.5-1.8 MiB a node before the server took those chunks itself (~1.1 after).
    """
    program = lp.Program('heap_pages')
    with program.group('counter'):
        for _ in range(2):
            program.add_node(lp.CourierNode(Counter))
    with lp.launch(program, launch_type='local_mp', terminal='output_to_files') as controller:
        copied = [_heap_private_dirty_kib(status.pid) for status in controller.statuses()]
    assert max(copied) <= 1.4 * _MIB, f'KiB of the heap written per node: {copied}'


_TAKE = """
import ctypes
from launchpad_py.node_side import heap_holes
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
blocks = [libc.malloc(size) for size in range(16, 4000, 37) for _ in range(3)]
for block in blocks[::2]:  # Holes of every size, below the top of the heap.
    libc.free(block)
taken = heap_holes.take()
libc.mallinfo2.restype = heap_holes._Mallinfo2
left = libc.mallinfo2()
print(taken, left.fordblks - left.keepcost)
"""


def test_take_leaves_no_free_chunk_below_the_top():
    """After ``heap_holes.take``, the heap's free memory is its top chunk alone."""
    done = subprocess.run([sys.executable, '-c', _TAKE], capture_output=True, text=True,
                          timeout=60, cwd=REPO, check=True)
    taken, left = (int(n) for n in done.stdout.split())
    assert taken > 100_000 and left < 48, done.stdout


_ENVIRONMENT = """
import os
from launchpad_py.launchers.local.process_starter import env_changes
from launchpad_py.node_side import fork_server
base = dict(os.environ)
# What preload may do to the server's environment: add a name, change one.
fork_server._drift.update({'LP_ADDED': None, 'LP_CHANGED': base['LP_CHANGED']})
os.environ.update(LP_ADDED='x', LP_CHANGED='by preload')
wanted = {**base, 'LP_NEW': 'n', 'LP_CHANGED': 'by group'}
del wanted['LP_GONE']
fork_server._set_environment(*env_changes(base, wanted))
print(dict(os.environ) == {**wanted, 'GRPC_VERBOSITY': 'ERROR'}, sorted(os.environ))
"""


def test_a_forked_node_gets_exactly_the_environment_it_asked_for():
    """The server sends only what differs from its own environment; the child still ends up
    with the launcher's environment, neither more (what preload set, names the launcher
    dropped) nor less (courier's GRPC_VERBOSITY default)."""
    env = {'PATH': '/usr/bin', 'LP_CHANGED': 'launcher', 'LP_GONE': 'g', 'PYTHONPATH': str(REPO)}
    done = subprocess.run([sys.executable, '-c', _ENVIRONMENT], capture_output=True, text=True,
                          timeout=60, cwd=REPO, check=True, env=env)
    assert done.stdout.startswith('True'), done.stdout
