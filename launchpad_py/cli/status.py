"""``python -m launchpad_py.cli.status``: a live table of a running program's nodes.

    python -m launchpad_py.cli.status                 # the one program running (else a list)
    python -m launchpad_py.cli.status agent --once    # by name, one table, then exit
    python -m launchpad_py.cli.status --handle /run/user/1000/launchpad_py/agent-4242-0.json

It reads the handle file the launcher wrote (see ``observability/status_endpoint``)
and asks the launcher over its socket, so it works for every launcher, and
only for the user who may read that file.
"""

from __future__ import annotations

import argparse
import glob
import json
import multiprocessing.connection as mpc
import os
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
            with open(path) as handle_file:
                handle = dict(json.load(handle_file), path=path)
        except (OSError, ValueError):
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
    with open(path) as handle_file:
        return json.load(handle_file)


def query(handle: dict, request: tuple = ('statistics',), timeout: float = 10.0):
    """One request to the launcher named by ``handle``; its reply."""
    connection = mpc.Client(handle['socket'], family='AF_UNIX',
                            authkey=bytes.fromhex(handle['key']))
    try:
        connection.send(request)
        if not connection.poll(timeout):
            raise TimeoutError(f'program {handle["program"]!r} did not answer in {timeout}s')
        _, value = connection.recv()  # ('reply', value)
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
                     f"{node['uptime_s']:.0f}s", str(node['restarts']), _num(node['calls'], 'd'),
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
        return read_handle(args.handle)
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
