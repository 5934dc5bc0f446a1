"""One fault run: launch the fault program, hit it once at a random moment, judge the end.

    result = one_run(random.Random(1), 'local_mp', hosts=[])

The victim is the launcher (one run in five) or a random node process (from
the launcher's ``pids`` file; if none has started yet, the first to start);
the fault a SIGKILL, a SIGSTOP held for a random pause
(then SIGCONT), or under ssh a connection reset (``net_faults``). The run
then counts what the issue asks: whether the program ended as its policy
says (``expected`` vs ``ended``), a hang (no end within ``HANG_S``),
processes left ``CLEAN_S`` after the end, a stop slower than the grace
period + 1 s, and lost or doubled updates (``fault_checks``). A hung run's
threads (launcher and nodes, by ``py-spy dump`` where installed) are written to
``hang_stacks.txt`` in its run directory before it is killed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import psutil

import fault_checks
import fault_nodes
import net_faults
from conftest import REPO, marked_processes

GRACE_S = 2  # Seconds (--lp_termination_notice_secs takes whole seconds).
HANG_S = 90.0
CLEAN_S = 15.0
LATEST_FAULT_S = 5.0  # Faults land in [0, this) after the launch began: start-up included.
LAUNCHER_IP = '10.250.0.1'  # The bridge of the namespace hosts: where nodes reach the launcher.
_HERE = os.path.dirname(os.path.abspath(__file__))


@dataclasses.dataclass
class Fault:
    victim: str            # 'launcher' or the node's 'label/index'
    kind: str              # kill, pause, reset-control, reset-ssh, reset-courier, missed
    at: float = 0.0        # time.monotonic() when it struck
    pause_s: float = 0.0


def _node_processes(run_dir: str) -> list[tuple[int, str]]:
    """(pid, 'label/index') of the program's node processes alive now."""
    try:
        with open(os.path.join(run_dir, 'pids')) as f:
            rows = [line.split() for line in f if line.endswith('\n')]
    except FileNotFoundError:
        return []
    alive = []
    for pid, label, index in rows:
        try:
            if psutil.Process(int(pid)).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                alive.append((int(pid), f'{label}/{index}'))
        except psutil.NoSuchProcess:
            pass
    return alive


def _first_nodes(run_dir: str, launcher: subprocess.Popen,
                 group: str | None = None) -> list[tuple[int, str]]:
    """The node processes alive now (of ``group`` only, if given), waiting for the first if
    none is (not past the launch): a planned fault's victim may start late on a loaded
    machine, and striking nothing would test nothing."""
    def alive() -> list[tuple[int, str]]:
        return [n for n in _node_processes(run_dir)
                if group is None or n[1].split('/')[0] == group]
    deadline = time.monotonic() + HANG_S
    while not (nodes := alive()) and launcher.poll() is None and time.monotonic() < deadline:
        threading.Event().wait(0.01)  # Polling the pids file the launcher appends to.
    return nodes


def _signal(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def _pause(pid: int, seconds: float) -> bool:
    """SIGSTOP, a pause, SIGCONT: a process frozen for a while (a VM stall, a long GC)."""
    if not _signal(pid, signal.SIGSTOP):
        return False
    threading.Event().wait(seconds)  # The fault's own length, not a synchronization.
    _signal(pid, signal.SIGCONT)
    return True


def _choose(rng, launcher: subprocess.Popen, run_dir: str, launch_type: str,
            plan: tuple[str, str] | None) -> tuple[int | None, Fault]:
    """The victim's pid and the fault: random, or ``plan`` = (group label or 'launcher', kind)."""
    if plan is not None:
        victim, kind = plan
        if victim == 'launcher':
            return launcher.pid, Fault('launcher', kind)
        nodes = _first_nodes(run_dir, launcher, victim)
        if not nodes:
            return None, Fault(victim, 'missed')
        pid, name = rng.choice(nodes)
        return pid, Fault(name, kind)
    if rng.random() < 0.2:
        return launcher.pid, Fault('launcher', rng.choice(['kill', 'pause']))
    nodes = _first_nodes(run_dir, launcher)
    if not nodes:
        return None, Fault('node', 'missed')  # The launch ended before any node started.
    pid, name = rng.choice(nodes)
    return pid, Fault(name, rng.choice(['kill', 'pause'] + (['reset'] if launch_type == 'ssh'
                                                              else [])))


def inject(rng, launcher: subprocess.Popen, run_dir: str, launch_type: str,
           plan: tuple[str, str] | None = None) -> Fault:
    """Picks the fault (see ``_choose``) and strikes it."""
    pid, fault = _choose(rng, launcher, run_dir, launch_type, plan)
    fault.at = time.monotonic()
    if pid is None:
        struck = False
    elif fault.kind == 'kill':
        struck = _signal(pid, signal.SIGKILL)
    elif fault.kind == 'pause':
        fault.pause_s = rng.uniform(0.2, 3.0)
        struck = _pause(pid, fault.pause_s)
    else:
        links = net_faults.choices(pid, LAUNCHER_IP, rng)
        kind = rng.choice(sorted(links)) if links else None
        struck = kind is not None and net_faults.reset(*links[kind])
        fault.kind = f'reset-{kind}'
    if not struck:
        fault.kind = 'missed'  # The process had ended (or had no such connection) already.
    return fault


def _read_json(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def expected_end(fault: Fault, stop_requested_at: float | None) -> set[str]:
    """How the fault program's policies say the run ends (a set: a race allows either)."""
    if fault.victim == 'launcher':
        return {'gone'} if fault.kind == 'kill' else {'finished'}
    # A pod deleted or evicted ends its node as a kill does (lp.Restart brings it back).
    ends_node = fault.kind in ('kill', 'reset-control', 'reset-ssh', 'delete', 'evict')
    if not (ends_node and fault.victim.startswith('coordinator/')):
        return {'finished'}  # Every other group restarts; pauses and lost calls are retried.
    if stop_requested_at is None or fault.at < stop_requested_at - 0.05:
        return {'failed:coordinator'}
    if fault.at <= stop_requested_at + 0.05:
        return {'failed:coordinator', 'finished'}  # Struck as it asked the program to stop.
    return {'finished'}  # It had already ended the program.


def _stop_seconds(fault: Fault, outcome: dict | None, result: dict | None) -> float | None:
    """How long the program took to stop once asked (or once its StopProgram node died),
    leaving out time the launcher itself spent frozen by the fault."""
    if outcome is None:
        return None
    if outcome['outcome'] == 'finished' and result is not None:
        began = result['stop_requested_at']
    elif outcome['outcome'] == 'failed':
        began = fault.at
    else:
        return None
    frozen = 0.0
    if fault.victim == 'launcher' and fault.kind == 'pause':
        frozen = max(0.0, min(fault.at + fault.pause_s, outcome['ended_at']) - max(fault.at, began))
    return outcome['ended_at'] - began - frozen


def _wait_gone(token: str, seconds: float) -> list[str]:
    """The run's processes still there after ``seconds``, as 'pid: command line' (what a left
    process was is the first thing its trace needs; the run's fake cluster may end it soon)."""
    deadline = time.monotonic() + seconds
    while marked_processes(token) and time.monotonic() < deadline:
        threading.Event().wait(0.1)  # Polling the process table; nothing announces an exit.
    left = []
    for process in marked_processes(token):
        try:
            left.append(f'{process.pid}: {" ".join(process.cmdline())[:300]}')
        except psutil.Error:  # Gone meanwhile.
            pass
    return left


def _dump_stacks(pids: list[int], path: str) -> None:
    """Every thread's stack of each of ``pids`` (``py-spy dump``, if installed) into
    ``path``: what a hung run was doing, taken before it is killed."""
    spy = shutil.which('py-spy') or os.path.join(os.path.dirname(sys.executable), 'py-spy')
    with open(path, 'w') as out:
        if not os.path.exists(spy):
            out.write('py-spy not installed (pip install py-spy): no stacks\n')
            return
        for pid in pids:
            try:
                dump = subprocess.run([spy, 'dump', '--pid', str(pid)], capture_output=True,
                                      text=True, timeout=60)
                out.write(f'== {pid}\n{dump.stdout}{dump.stderr}\n')
            except subprocess.TimeoutExpired:
                out.write(f'== {pid}: py-spy dump timed out\n')


def one_run(rng, launch_type: str, hosts: list[str], plan: tuple[str, str] | None = None,
            delay: float | None = None, strike=inject, env: dict | None = None) -> dict:
    """Launches, strikes one fault, and returns what happened (see the module docstring).

    ``strike``: picks and strikes the fault, as ``inject`` (which it defaults to) does;
    ``env``: more variables for the launcher (``kube_faults`` passes both)."""
    token = f'lp-faultrun-{uuid.uuid4().hex}'
    run_dir = tempfile.mkdtemp(prefix='lp_faultrun_')
    command = [sys.executable, os.path.join(_HERE, 'fault_launcher.py'),
               f'--lp_termination_notice_secs={GRACE_S}', launch_type, run_dir, *hosts]
    env = {**os.environ, 'LP_TEST_TOKEN': token,
           'PYTHONPATH': os.pathsep.join([_HERE, os.path.join(REPO, 'tests'), REPO]),
           **(env or {})}
    with open(os.path.join(run_dir, 'launcher.log'), 'wb') as log:
        launcher = subprocess.Popen(command, cwd=REPO, env=env, stdout=log,
                                    stderr=subprocess.STDOUT)
    try:
        launcher.wait(rng.uniform(0, LATEST_FAULT_S) if delay is None else delay)
    except subprocess.TimeoutExpired:
        pass
    fault = strike(rng, launcher, run_dir, launch_type, plan)
    try:
        launcher.wait(HANG_S)
        hang = False
    except subprocess.TimeoutExpired:
        hang = True
        _dump_stacks(sorted({launcher.pid, *(p.pid for p in marked_processes(token))}),
                     os.path.join(run_dir, 'hang_stacks.txt'))
        launcher.kill()
        launcher.wait()
    left_processes = _wait_gone(token, CLEAN_S if not hang else HANG_S)
    outcome = _read_json(os.path.join(run_dir, 'outcome.json'))
    result = _read_json(os.path.join(run_dir, 'result.json'))
    ended = 'gone' if outcome is None else (
        outcome['outcome'] if outcome['outcome'] != 'failed' else f'failed:{outcome["label"]}')
    stop_requested = result['stop_requested_at'] if result else None
    return {'fault': dataclasses.asdict(fault), 'run_dir': run_dir, 'hang': hang,
            'left': len(left_processes), 'left_processes': left_processes,
            'expected': sorted(expected_end(fault, stop_requested)), 'ended': ended,
            'why': (outcome or {}).get('why'), 'restarts': (outcome or {}).get('restarts', {}),
            'stop_s': _stop_seconds(fault, outcome, result),
            'updates': fault_checks.check_updates(
                run_dir, fault_nodes.ACTORS, fault_nodes.UPDATES,
                complete=ended == 'finished' and bool(result))}
