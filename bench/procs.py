"""Process helpers: start a server module in its own process, stop it, read RSS.

A server process is started as ``python -m <package>.<module> --serve ...``
with a pipe on its stdin.  It reports readiness by printing one line
``READY <address>`` on stdout (a handshake, never a sleep), and it exits when
its stdin reaches EOF -- so it also goes away if the benchmark process dies.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

try:  # optional
    import psutil  # type: ignore
except ImportError:  # pragma: no cover - depends on the environment
    psutil = None

PACKAGE = __package__ or "bench"
# The folder that holds the package, so children can ``-m PACKAGE.module``.
PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)


def child_env() -> dict:
    env = dict(os.environ)
    parts = [PACKAGE_PARENT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    return env


class ServerProcess:
    """A server started with :func:`start_server`."""

    def __init__(self, proc: subprocess.Popen, address: str):
        self.proc = proc
        self.address = address

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self, timeout: float = 5.0) -> None:
        p = self.proc
        if p.poll() is None:
            try:
                p.stdin.close()  # the server exits on stdin EOF
            except OSError:
                pass
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.terminate()
                try:
                    p.wait(timeout)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        for f in (p.stdin, p.stdout):
            try:
                if f:
                    f.close()
            except OSError:
                pass


def spawn_server(module: str, args: list[str], new_session: bool = True) -> subprocess.Popen:
    """Starts ``python -m PACKAGE.module --serve *args`` without waiting.

    The server gets a session of its own, as a node that ``local_mp`` launches
    does: with the kernel's autogroups on, a session is a scheduling group, and
    a server that shared the benchmark's group (its callers') would be
    scheduled unlike the launched peer it is compared with (docs/performance.md,
    "Ninth pass"); ``new_session=False`` keeps it in the benchmark's, for that
    A/B (bench/fanin_sessions.py). It still ends with the benchmark: it exits on
    stdin EOF.
    """
    cmd = [sys.executable, "-m", f"{PACKAGE}.{module}", "--serve", *args]
    return subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=child_env(), cwd=PACKAGE_PARENT,
        start_new_session=new_session,
    )


def wait_ready(proc: subprocess.Popen, timeout: float = 60.0) -> ServerProcess:
    """Waits for the ``READY <address>`` line of a spawned server."""
    deadline = time.monotonic() + timeout
    line = b""
    fd = proc.stdout.fileno()
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or proc.poll() is not None:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"server {proc.args} did not become ready: {line!r}")
        r, _, _ = select.select([fd], [], [], min(left, 0.5))
        if r:
            chunk = os.read(fd, 256)
            line += chunk
    text = line.decode().strip()
    if not text.startswith("READY "):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"unexpected handshake from {proc.args}: {text!r}")
    return ServerProcess(proc, text.split(" ", 1)[1])


def start_server(module: str, args: list[str], ready_timeout: float = 60.0) -> ServerProcess:
    """Starts a server module in its own process and waits until it listens."""
    return wait_ready(spawn_server(module, args), ready_timeout)


def announce_ready(address: str) -> None:
    """Server side: reports the bound address to the parent."""
    sys.stdout.write(f"READY {address}\n")
    sys.stdout.flush()


def exit_when_stdin_closes(cleanup=None) -> threading.Thread:
    """Server side: a daemon thread that exits the process on stdin EOF."""

    def watch():
        try:
            while sys.stdin.buffer.read1(4096):
                pass
        except (OSError, ValueError):
            pass
        if cleanup is not None:
            try:
                cleanup()
            except Exception:  # noqa: BLE001 - exiting anyway
                pass
        os._exit(0)

    t = threading.Thread(target=watch, name="stdin-watch", daemon=True)
    t.start()
    return t


def rss_bytes(pid: int) -> int | None:
    """Resident set size of ``pid`` (psutil if installed, else /proc)."""
    if psutil is not None:
        try:
            return psutil.Process(pid).memory_info().rss
        except psutil.Error:
            return None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def uss_bytes(pid: int) -> int | None:
    """Unique set size (memory freed if the process exited), if measurable."""
    if psutil is not None:
        try:
            return psutil.Process(pid).memory_full_info().uss
        except (psutil.Error, AttributeError):
            return None
    try:  # Private_Clean + Private_Dirty from smaps_rollup
        total = 0
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith(("Private_Clean:", "Private_Dirty:")):
                    total += int(line.split()[1]) * 1024
        return total
    except OSError:
        return None


def descendants(pid: int) -> list[int]:
    """PIDs of all descendants of ``pid`` (from /proc, no psutil needed)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name may hold spaces; fields after ')' are fixed.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out
