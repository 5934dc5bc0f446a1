"""What a server does per call under fan-in, counted: system calls, context switches and
Python function calls, the courier server against the floor.

Run from the repository root (as root, with ``perf`` installed: it counts the
kernel's syscall tracepoints)::

    python -m bench.server_counts                      # 4 and 16 callers, both peers
    python -m bench.server_counts --callers 16 --calls 2000 --peers launchpad
    LP_COURIER_PURE=1 python -m bench.server_counts --callers 16 --peers launchpad,launchpad_tcp

Counts, not times: load on the machine barely moves them. Each caller process makes
``--calls`` synchronous ``ping()`` calls once every caller is connected and warm;
``perf stat`` counts the server process's threads for exactly that window (a
counter, unlike ``strace``, which slows every system call and so multiplies the
GIL waits it would count). The caller
processes' CPU is counted in the same window (a fan-in call's CPU is mostly theirs). The
function calls are counted by a profile hook (``threading.setprofile``) on the
server's serving threads, in a second run without ``strace``. A futex call is the
kernel side of a thread waiting for (or waking a waiter of) the GIL or a lock, so
futexes per call count the GIL hand-offs that had to wait.
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import subprocess
import sys
import tempfile

from . import procs

SYSCALLS = ('futex', 'recvmsg', 'recvfrom', 'sendmsg', 'sendto', 'epoll_wait', 'poll',
            'clock_nanosleep', 'select')
EVENTS = ','.join([f'syscalls:sys_enter_{name}' for name in SYSCALLS] + ['context-switches', 'task-clock'])

# The server: a courier Server of ping() or the floor, counting Python calls on request.
SERVER = r'''
import collections, os, sys, threading
counts = collections.Counter()
if os.environ.get('COUNT_CALLS'):
    def hook(frame, event, arg):
        if event == 'call' or event == 'c_call':
            counts[threading.current_thread().name.split('-')[0]] += 1
    threading.setprofile(hook)
from bench.peer import EchoService
if sys.argv[1].startswith('launchpad'):
    from launchpad_py import courier
    server = courier.Server(EchoService(), thread_pool_size=16).start()
    print(server.address, flush=True)
else:
    import socket
    from bench import peers_floor
    path = sys.argv[2]
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(128)
    def accept():
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=peers_floor._serve_connection, args=(conn, EchoService()),
                             name='floor-connection', daemon=True).start()
    threading.Thread(target=accept, name='accept', daemon=True).start()
    print('unix:' + path, flush=True)
sys.stdin.readline()  # 'reset': the counts start now.
counts.clear()
sys.stdin.readline()  # 'report'
print(sum(n for name, n in counts.items() if name in ('courier', 'floor')), flush=True)
sys.stdin.read()
'''

# A caller: connects, warms up, waits for 'go', makes its calls, says 'done'.
# ``launchpad_tcp``: the same server, reached over raw TCP.
CALLER = r'''
import sys
peer, address, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
if peer.startswith('launchpad'):
    from launchpad_py import courier
    client = courier.Client(address, transport='tcp' if peer == 'launchpad_tcp' else 'auto')
    call = lambda: client.ping()
else:
    from bench import peers_floor
    client = peers_floor.connect(address)
    call = lambda: client.call('ping')
for _ in range(200):
    call()
print('ready', flush=True)
sys.stdin.readline()
for _ in range(calls):
    call()
print('done', flush=True)
'''


def run(peer: str, callers: int, calls: int, trace: bool) -> dict:
    """One measured window: strace's table (``trace``) or the Python call count."""
    env = procs.child_env()
    if not trace:
        env['COUNT_CALLS'] = '1'
    folder = tempfile.mkdtemp(prefix='lp_counts_')
    server = subprocess.Popen([sys.executable, '-c', SERVER, peer, os.path.join(folder, 's')],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    address = server.stdout.readline().strip()
    clients = [subprocess.Popen([sys.executable, '-c', CALLER, peer, address, str(calls)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                env=procs.child_env()) for _ in range(callers)]
    out, out_callers = os.path.join(folder, 'counts'), os.path.join(folder, 'callers')
    tracer = callers_tracer = None
    try:
        for client in clients:
            assert client.stdout.readline().strip() == 'ready'
        if trace:
            control, ack = os.path.join(folder, 'control'), os.path.join(folder, 'ack')
            os.mkfifo(control)
            os.mkfifo(ack)
            tracer = subprocess.Popen(['perf', 'stat', '-x', ',', '-o', out, '-e', EVENTS, '-D',
                                       '-1', '--control', f'fifo:{control},{ack}', '-p',
                                       str(server.pid)], stderr=subprocess.DEVNULL)
            _perf_command(control, ack, 'enable')
            callers_tracer = subprocess.Popen(
                ['perf', 'stat', '-x', ',', '-o', out_callers, '-e', 'task-clock', '-p',
                 ','.join(str(client.pid) for client in clients)], stderr=subprocess.DEVNULL)
        server.stdin.write('reset\n')
        server.stdin.flush()
        for client in clients:
            client.stdin.write('go\n')
            client.stdin.flush()
        for client in clients:
            assert client.stdout.readline().strip() == 'done'
        server.stdin.write('report\n')
        server.stdin.flush()
        python_calls = int(server.stdout.readline())
        if tracer is not None:
            _perf_command(control, ack, 'disable')
            for perf in (tracer, callers_tracer):
                perf.send_signal(signal.SIGINT)
                perf.wait(30)
            table = _counters(out)
            table['callers-task-clock'] = _counters(out_callers).get('task-clock', 0)
            return {name: n / (callers * calls) for name, n in table.items()}
        return {'python_calls': python_calls / (callers * calls)}
    finally:
        for process in clients + [server]:
            process.stdin.close()
        for process in clients + [server]:
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:  # Say so, but leave nothing running.
                print(f'process {process.pid} did not exit in 60 s: killed', file=sys.stderr)
                process.kill()
                process.wait()


def _perf_command(control: str, ack: str, command: str) -> None:
    """Sends ``perf stat`` a command over its control fifo and waits for its 'ack'."""
    with open(control, 'w') as out:
        out.write(command + '\n')
    with open(ack) as answer:
        if answer.readline().strip() != 'ack':
            raise RuntimeError(f'perf stat did not acknowledge {command!r}')


def _counters(path: str) -> dict[str, int]:
    """perf stat's CSV: count per event, named without the tracepoint prefix."""
    table: dict[str, int] = {}
    with open(path) as summary:
        for line in summary:
            fields = line.strip().split(',')
            if len(fields) > 2 and fields[0].replace('.', '').isdigit():
                table[fields[2].replace('syscalls:sys_enter_', '')] = float(fields[0])
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--callers', default='4,16', help='comma list of caller counts')
    parser.add_argument('--calls', type=int, default=2000, help='calls per caller')
    parser.add_argument('--peers', default='launchpad,floor_unix',
                        help='comma list of launchpad, launchpad_tcp (raw TCP), floor_unix')
    args = parser.parse_args()
    for callers in [int(n) for n in args.callers.split(',')]:
        for peer in args.peers.split(','):
            name = peer if peer.startswith('launchpad') else 'floor'
            table = run(name, callers, args.calls, trace=True)
            python = run(name, callers, args.calls, trace=False)['python_calls']
            switches = table.pop('context-switches', 0)
            cpu_us = table.pop('task-clock', 0) * 1000  # perf gives milliseconds.
            callers_us = table.pop('callers-task-clock', 0) * 1000
            shown = ', '.join(f'{k} {v:.2f}' for k, v in sorted(table.items(), key=lambda kv: -kv[1])
                              if v >= 0.01)
            print(f'{peer} fan-in {callers}: per call: system calls {sum(table.values()):.2f} '
                  f'({shown}); context switches {switches:.2f}; CPU {cpu_us:.1f} µs; '
                  f'Python calls {python:.1f}; the callers\' CPU {callers_us:.1f} µs',
                  flush=True)


if __name__ == '__main__':
    main()
