"""Peak USS of a process tree, sampled from a process of its own that only takes idle CPU.

Reading ``/proc/PID/smaps_rollup`` makes the kernel walk the process's page tables: over
2,000 node processes one pass takes more than a second of CPU. Sampled from a thread of
the launching process once a second (bench/scale.py until stop 41), that held one of two
cores for the whole launch it measured. Here the sampler is a separate process under
``SCHED_IDLE`` while the launch runs (it gets only CPU nobody else wants) and rests as
long as its last pass took (at most half of what it gets). Told "ready", it returns to
the normal policy and makes a pass at once: the nodes write most of their memory after
their fork, while they serve, so the peak comes after ready and must not be missed by a
sampler starved by the nodes themselves.

    sampler = UssSampler(root_pid=os.getpid())
    controller = lp.launch(program)
    sampler.ready()
    ...
    result = sampler.stop()   # {'peak_uss': ..., 'cpu_s': ..., 'passes': ...}
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time

import psutil

#: Marks processes elsewhere (the ssh hosts' nodes, not our descendants) in their environment.
MARK = 'LP_BENCH_MARK'
#: Shortest rest between passes, seconds: a pass over a few processes is cheap, but its
#: numbers need no finer grain.
MIN_REST_S = 0.5


def _never() -> bool:
    return False


def marked(mark: str) -> list[psutil.Process]:
    """Processes whose environment holds ``MARK=mark`` (the nodes and agents of one run) or
    whose command line names it (the ssh clients)."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get(MARK) == mark or mark in ' '.join(process.cmdline()):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


def tree_uss(root: psutil.Process, mark: str | None,
             interrupted=_never) -> dict[psutil.Process, int]:
    """USS of ``root``, every process below it and the ``mark``ed ones, less this sampler
    itself (keyed by process: pid and start time); if ``interrupted()`` turns true, those read
    so far."""
    ours = {root, *root.children(recursive=True), *(marked(mark) if mark else [])}
    uss = {}
    for process in ours:
        if process.pid == os.getpid():
            continue
        if interrupted():
            break
        try:
            uss[process] = process.memory_full_info().uss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return uss


class _Peaks:
    """Largest sums before ready, at ready and after; each process's largest USS; what the
    passes cost.

    A pass over 1,000 nodes takes seconds, and the benchmark's program ends a few seconds
    after ready: a pass begun at ready finds the last nodes gone (4.7 GiB at 1,000 nodes
    where every node alive holds 8.5). So the peak reported is each process's largest USS,
    summed: every node is alive from its start until the stop, and at ready all are, each
    at least as large as when it was read (a node only writes more of its pages). One
    pass's sum, a lower bound, is kept beside it.
    """

    def __init__(self):
        self.before_ready = self.at_ready = self.after_ready = 0
        self.each: dict[psutil.Process, int] = {}
        self.passes = 0
        self.longest_pass_s = 0.0

    def sample(self, root: psutil.Process, mark: str | None, phase: str,
               interrupted=_never) -> float:
        started = time.perf_counter()
        uss = tree_uss(root, mark, interrupted)
        took = time.perf_counter() - started
        for process, used in uss.items():
            self.each[process] = max(self.each.get(process, 0), used)
        total = sum(uss.values())
        setattr(self, phase, max(getattr(self, phase), total))
        self.passes += 1
        self.longest_pass_s = max(self.longest_pass_s, took)
        return took

    def report(self) -> dict:
        times = os.times()
        return {'peak_uss': sum(self.each.values()), 'processes_seen': len(self.each),
                'peak_uss_of_one_pass': max(self.before_ready, self.at_ready,
                                            self.after_ready),
                'peak_uss_before_ready': self.before_ready, 'uss_at_ready': self.at_ready,
                'peak_uss_after_ready': self.after_ready, 'passes': self.passes,
                'longest_pass_s': self.longest_pass_s, 'cpu_s': times.user + times.system}


def _serve(root_pid: int, mark: str | None) -> None:
    """The sampler process: sample until stdin says ``stop`` (or closes); report on stdout."""
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    root, peaks, phase = psutil.Process(root_pid), _Peaks(), 'before_ready'
    took = peaks.sample(root, mark, phase)
    print('sampling', flush=True)  # After a first pass: what runs before the launch is seen.
    stdin = sys.stdin.fileno()  # Read raw: a buffered reader would hide lines from select.

    def told() -> bool:  # A command waits on stdin.
        return bool(select.select([stdin], [], [], 0)[0])

    while True:
        readable, _, _ = select.select([stdin], [], [], max(MIN_REST_S, took))
        commands = os.read(stdin, 4096).decode().split() if readable else []
        if 'ready' in commands and phase == 'before_ready':
            peaks.sample(root, mark, 'at_ready')
            phase = 'after_ready'
        if readable and (not commands or 'stop' in commands):  # 'stop', or stdin closed.
            print(json.dumps(peaks.report()), flush=True)
            return
        # A pass before ready gives way to a command: over 1,000 starved nodes it can take
        # seconds, and the program may end soon after ready; the pass at ready must not wait.
        took = peaks.sample(root, mark, phase, told if phase == 'before_ready' else _never)


class UssSampler:
    """Starts the sampler process over ``root_pid``'s tree (and ``mark``ed processes)."""

    def __init__(self, root_pid: int, mark: str | None = None):
        command = [sys.executable, '-m', 'bench.uss_sampler', str(root_pid)] + (
            [mark] if mark else [])
        self._process = subprocess.Popen(command, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True,
                                         cwd=os.path.dirname(os.path.dirname(__file__)))
        self.pid = self._process.pid
        if self._process.stdout.readline().strip() != 'sampling':
            raise RuntimeError(f'uss sampler (pid {self.pid}) did not start: '
                               f'exit code {self._process.wait(timeout=30)}')

    def ready(self) -> None:
        """Every node is up: one pass now, at normal priority, and on until ``stop``."""
        # Set from here, not by the sampler: under SCHED_IDLE beside 1,000 busy nodes it
        # might not run for seconds to read the command, and the program may end by then.
        os.sched_setscheduler(self.pid, os.SCHED_OTHER, os.sched_param(0))
        self._process.stdin.write('ready\n')
        self._process.stdin.flush()

    def stop(self, timeout: float = 120.0) -> dict:
        """Ends the sampler; its peaks (bytes), passes and CPU seconds."""
        out, _ = self._process.communicate('stop\n', timeout=timeout)
        return json.loads(out)


if __name__ == '__main__':
    _serve(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None)
