"""``python -m launchpad_py.cli.status``: a live table of a running program's nodes.

    python -m launchpad_py.cli.status                 # the one program running (else a list)
    python -m launchpad_py.cli.status agent --once    # by name, one table, then exit
    python -m launchpad_py.cli.status --handle /run/user/1000/launchpad_py/agent-4242-0.json

It reads the handle file the launcher wrote (see ``observability/status_endpoint``)
and asks the launcher over its socket, so it works for every launcher, and
only for the user who may read that file. A handle file or socket that is
not this user's alone is refused (another user could have made both, key
included), and replies are read as plain data only: nothing the socket sends
can run code here.
"""

from __future__ import annotations

import argparse
import glob
import json
import multiprocessing.connection as mpc
import io
import os
import pickle
import stat
import sys
import threading
import time

from launchpad_py.observability import status_endpoint


def find_handles() -> list[dict]:
    """Handle files of programs whose launcher is still alive, newest first."""
    try:
        directory = status_endpoint.run_dir()
    except (FileNotFoundError, PermissionError):
        return []
    handles = []
    for path in glob.glob(os.path.join(directory, '*.json')):
        try:
            handle = dict(read_handle(path), path=path)
        except (OSError, ValueError):  # Gone meanwhile, half written, or not ours alone.
            continue
        if _alive(handle.get('pid')):
            handles.append(handle)
    return sorted(handles, key=lambda h: h['started'], reverse=True)


def _alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except (OSError, TypeError, ValueError):
        return False
    return True


def read_handle(path: str) -> dict:
    """The handle in ``path``; PermissionError when the file, or the socket it names, is not
    this user's alone."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with open(descriptor) as handle_file:
        _check_private(os.fstat(descriptor), path, 'handle file', stat.S_ISREG, 0o600)
        handle = json.load(handle_file)
    socket_path = str(handle.get('socket'))
    _check_private(os.lstat(socket_path), socket_path, 'status socket', stat.S_ISSOCK, 0o777)
    directory = os.path.dirname(socket_path) or '.'
    _check_private(os.lstat(directory), directory, 'directory of the status socket',
                   stat.S_ISDIR, 0o700)
    return handle


def _check_private(info: os.stat_result, path: str, what: str, kind, widest: int) -> None:
    mode = stat.S_IMODE(info.st_mode)
    if not kind(info.st_mode) or info.st_uid != os.getuid() or mode & ~widest:
        raise PermissionError(
            f'refusing the {what} {path}: it must be ours (uid {os.getuid()}) with mode at most '
            f'{widest:04o}, and it belongs to uid {info.st_uid} with mode {mode:04o}; another '
            'user may have made it. Use a handle file the launcher wrote for you')


class _PlainData(pickle.Unpickler):
    """Reads replies of dicts, lists, strings and numbers; refuses anything that names code."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f'the status socket sent a {module}.{name}; only plain '
                                     'data is accepted')


def query(handle: dict, request: tuple = ('statistics',), timeout: float = 10.0):
    """One request to the launcher named by ``handle``; its reply."""
    connection = mpc.Client(handle['socket'], family='AF_UNIX',
                            authkey=bytes.fromhex(handle['key']))
    try:
        connection.send(request)
        if not connection.poll(timeout):
            raise TimeoutError(f'program {handle["program"]!r} did not answer in {timeout}s')
        _, value = _PlainData(io.BytesIO(connection.recv_bytes())).load()  # ('reply', value)
        return value
    finally:
        connection.close()


def _size(n) -> str:
    if n is None:
        return '-'
    for unit in ('B', 'K', 'M', 'G'):
        if abs(n) < 1024 or unit == 'G':
            return f'{n:.0f}{unit}' if unit == 'B' else f'{n:.1f}{unit}'
        n /= 1024
    return str(n)


def _restarts(node: dict) -> str:
    """``'3'``, or ``'3 (host_lost 1)'`` when the platform caused some (not counted)."""
    lost = {why: n for why, n in node.get('restart_reasons', {}).items() if why != 'failed'}
    if not lost:
        return str(node['restarts'])
    return f"{node['restarts']} ({', '.join(f'{why} {n}' for why, n in sorted(lost.items()))})"


def _num(value, spec: str) -> str:
    return '-' if value is None else format(value, spec)


def _ms(seconds) -> str:
    return '-' if seconds is None else f'{seconds * 1e3:.2f}ms'


COLUMNS = ('NODE', 'STATE', 'HOST', 'PID', 'UPTIME', 'RESTARTS', 'CALLS', 'CALLS/S', 'IN FLIGHT',
           'BYTES IN', 'BYTES OUT', 'RSS', 'CPU%')


def format_table(report: dict) -> str:
    """The status table of one ``('statistics',)`` reply, with per-method lines under each node."""
    rows = [COLUMNS]
    extra: dict[int, list[str]] = {}
    for node in report['nodes']:
        rows.append((node['name'], node['state'], node['host'], _num(node['pid'], 'd'),
                     f"{node['uptime_s']:.0f}s", _restarts(node), _num(node['calls'], 'd'),
                     _num(node['calls_per_s'], '.1f'), _num(node['in_flight'], 'd'),
                     _size(node['bytes_in']), _size(node['bytes_out']), _size(node['rss_bytes']),
                     _num(node['cpu_percent'], '.0f')))
        lines = [f"    {m['name']}: {m['calls']} calls, {m['errors']} failed, mean "
                 f"{_ms(m['mean_s'])}, p99 {_ms(m['p99_s'])}" for m in node['methods']]
        if node['last_error']:
            lines.append(f"    last error: {node['last_error']}")
        extra[len(rows) - 1] = lines
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    state = 'running' if report['running'] else 'ended'
    out = [f"program {report['program']!r} ({report['launch_type']}, {state})"]
    for number, row in enumerate(rows):
        out.append('  '.join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
        out.extend(extra.get(number, []))
    return '\n'.join(out)


def _choose(args) -> dict:
    if args.handle:
        try:
            return read_handle(args.handle)
        except (OSError, ValueError) as exc:
            raise SystemExit(f'cannot use --handle {args.handle}: {exc}') from None
    handles = find_handles()
    if args.name:
        handles = [h for h in handles if h['program'] == args.name]
    if len(handles) == 1 or (args.name and handles):
        return handles[0]
    names = ', '.join(f"{h['program']} (pid {h['pid']}, {h['path']})" for h in handles)
    if not handles:
        where = os.environ.get(status_endpoint.RUN_DIR_ENV) or 'the run directory'
        raise SystemExit(f'no running program{" named " + repr(args.name) if args.name else ""} '
                         f'found in {where}; pass --handle FILE')
    raise SystemExit(f'several programs are running: {names}; name one, or pass --handle FILE')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog='python -m launchpad_py.cli.status',
                                     description='Live per-node status of a running program.')
    parser.add_argument('name', nargs='?', help='program name (default: the only one running)')
    parser.add_argument('--handle', help='handle file the launcher wrote (see docs)')
    parser.add_argument('--once', action='store_true', help='print one table and exit')
    parser.add_argument('--json', action='store_true', help='print the raw statistics as JSON')
    parser.add_argument('--interval', type=float, default=1.0, help='seconds between refreshes')
    args = parser.parse_args(argv)
    handle = _choose(args)
    pause = threading.Event()
    while True:
        try:
            report = query(handle)
        except (OSError, EOFError):
            print(f"program {handle['program']!r} has ended", file=sys.stderr)
            return 0
        text = json.dumps(report, indent=1) if args.json else format_table(report)
        if args.once:
            print(text)
            return 0
        if sys.stdout.isatty():
            sys.stdout.write('\033[H\033[2J')
        print(f'{text}\n({time.strftime("%H:%M:%S")}; Ctrl-C to quit)', flush=True)
        pause.wait(args.interval)


if __name__ == '__main__':
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
