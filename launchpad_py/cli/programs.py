"""``python -m launchpad_py submit|list|status|logs|stop|dashboard``: programs that outlive the terminal.

    python -m launchpad_py submit --launch_type slurm --sbatch '--ntasks=4' train.py --steps=10
    python -m launchpad_py submit --launch_type kubernetes --image registry/team/agent:1.2 \
        --controller_restarts 2 train.py      # --dry_run prints every manifest instead
    python -m launchpad_py list
    python -m launchpad_py logs trainer-3f9a1c -f --node learner --grep loss
    python -m launchpad_py stop trainer-3f9a1c --grace 30
    python -m launchpad_py dashboard trainer-3f9a1c     # prints http://127.0.0.1:PORT/?token=...

Each command finds the program by the record ``submit`` wrote for this user
(``submission/records``) and talks to its controller with the program's
secret, read from a 0600 file. Exit codes: 0 done; 1 the platform or the
program failed (the message says how); 2 bad usage; 3 no such program.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from launchpad_py import errors
from launchpad_py.cli.status import format_table
from launchpad_py.submission import records, stamps
from launchpad_py.submission.submit import submit
from launchpad_py.submission.submitted import attach, submitted_programs

EXIT_FAILED, EXIT_UNKNOWN = 1, 3


def _kubernetes_options(args) -> dict | None:
    given = {'image': args.image, 'namespace': args.namespace, 'context': args.context}
    given = {key: value for key, value in given.items() if value is not None}
    if args.launch_type == 'kubernetes':
        return given
    if given or args.dry_run:
        raise errors.ProgramError('--image, --namespace, --context and --dry_run are for '
                                  f'--launch_type kubernetes (got {args.launch_type})')
    return None


def _submit(args) -> int:
    options = _kubernetes_options(args)
    program = submit(args.script, *args.args, launch_type=args.launch_type, host=args.host,
                     ssh_options=shlex.split(args.ssh_options or ''),
                     sbatch_args=shlex.split(args.sbatch or ''),
                     program_launch_type=args.program_launch_type, name=args.name,
                     requeue=args.requeue, signal_s=args.signal_s,
                     controller_restarts=args.controller_restarts,
                     **({'kubernetes_options': options, 'dry_run': args.dry_run}
                        if options is not None else {}))
    if args.dry_run:
        import yaml  # Comes with the kubernetes client, which rendering needed.
        sys.stdout.write(yaml.safe_dump_all(program, sort_keys=False))
        print('launchpad_py: dry run: nothing was applied', file=sys.stderr)
        return 0
    print(program.id)
    print(f'launchpad_py: submitted {program.name!r} as {program.id} ({program.where}); '
          f'follow it with `python -m launchpad_py logs {program.id} -f`', file=sys.stderr)
    return 0


def _nodes(status: dict) -> str:
    nodes = [n for p in status['programs'] for n in p['nodes']]
    running = sum(1 for n in nodes if n['state'] == 'running')
    return f'{running}/{len(nodes)}' if nodes else '-'


def _list(args) -> int:
    rows = [('ID', 'NAME', 'LAUNCHER', 'STATE', 'STARTED', 'NODES', 'WHERE')]
    for program in submitted_programs():
        try:
            status = program.status()
        except errors.LaunchError as exc:  # One unreachable host must not hide the others.
            status = {'state': f'unknown ({exc})', 'programs': []}
        rows.append((program.id, program.name, program.launcher, status['state'],
                     records.started_text(program.record), _nodes(status), program.where))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print('  '.join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return 0


def _status(args) -> int:
    program = attach(args.id)
    status = program.status()
    exit_code = f', exit code {status["exit_code"]}' if 'exit_code' in status else ''
    print(f'{program.id}: {program.name!r} on {program.launcher} ({program.where}), '
          f'{status["state"]}{exit_code}; started {records.started_text(program.record)}')
    for report in status['programs']:
        print(format_table(report))
    return 0


def _logs(args) -> int:
    program = attach(args.id)
    try:
        since = None if args.since is None else stamps.parse_since(args.since)
    except ValueError as exc:
        print(f'error: {exc}', file=sys.stderr)
        return 2
    if args.follow:
        for line in program.follow_logs(args.node, args.grep, since, args.timestamps):
            sys.stdout.write(line)
            sys.stdout.flush()
    else:
        sys.stdout.write(program.logs(args.node, args.grep, since, args.timestamps))
    return 0


def _stop(args) -> int:
    program = attach(args.id)
    state = program.stop(grace=args.grace, timeout=args.timeout)
    print(f'{program.id}: {state}')
    return 0 if state in ('ended', 'failed', 'lost') else EXIT_FAILED


def _dashboard(args) -> int:
    program = attach(args.id)
    tunnel, url = program.open_dashboard(args.port, shlex.split(args.ssh_options or ''))
    print(url, flush=True)
    print('launchpad_py: forwarding until the program ends (Ctrl-C to stop)', file=sys.stderr)
    try:
        while tunnel.wait(timeout=5.0) is None and program.state() in ('pending', 'running'):
            pass
    finally:
        tunnel.close()
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog='python -m launchpad_py',
        description='Programs that outlive the terminal: submit a launching script so that its '
                    'controller runs on the cluster, then list, watch, read and stop it from '
                    'any terminal. See docs/walk_away.md.')
    commands = top.add_subparsers(dest='command', required=True, metavar='COMMAND')
    run = commands.add_parser('submit', help='start a script\'s program where it runs; print '
                              'its id', description='Runs SCRIPT (which calls lp.launch) on the '
                              'platform, not in this terminal; prints the program id.')
    run.add_argument('--launch_type', choices=('slurm', 'ssh', 'kubernetes'), default='slurm',
                     help='where the controller runs: an sbatch job (slurm), a detached '
                          'session on --host (ssh), or the pod of a Job (kubernetes); '
                          'default slurm')
    run.add_argument('--host', help='for ssh: the host (a name of your ssh config)')
    run.add_argument('--ssh_options', help="for ssh: extra ssh arguments, e.g. '-F my_config'")
    run.add_argument('--sbatch', help="for slurm: sbatch arguments, e.g. '--ntasks=4 --time=1:00:00'")
    run.add_argument('--requeue', action='store_true',
                     help='for slurm: the job may be requeued (preemption, scontrol requeue, '
                          'the time limit with --signal_s); the program then resumes from its '
                          "nodes' checkpoints")
    run.add_argument('--signal_s', type=int,
                     help='with --requeue: seconds before the time limit at which the job '
                          'checkpoints and requeues itself')
    run.add_argument('--controller_restarts', type=int, default=0,
                     help='for kubernetes and ssh: start the controller again, up to this many '
                          'times, when it fails or dies; the program then runs again from its '
                          "nodes' checkpoints")
    run.add_argument('--image', help='for kubernetes: the controller\'s image (launchpad_py and '
                                     'what the script imports)')
    run.add_argument('--namespace', help='for kubernetes: the namespace (default: default)')
    run.add_argument('--context', help='for kubernetes: the kubeconfig context')
    run.add_argument('--dry_run', action='store_true',
                     help='for kubernetes: print every manifest (YAML) and apply nothing')
    run.add_argument('--program_launch_type',
                     help="the default launch_type of the script's lp.launch (slurm: 'slurm', "
                          "kubernetes: 'kubernetes')")
    run.add_argument('--name', help='the program name in ids and lists (default: the script)')
    run.add_argument('script', help='the launching script')
    run.add_argument('args', nargs=argparse.REMAINDER, help='the script\'s arguments')
    run.set_defaults(main=_submit)
    commands.add_parser('list', help='this user\'s submitted programs',
                        description='Id, name, launcher, state, start and nodes running/total of '
                                    'every program this user submitted.').set_defaults(main=_list)
    for name, main, text in (('status', _status, 'one program\'s state and node table'),
                             ('logs', _logs, 'a program\'s output, every node\'s lines prefixed'),
                             ('stop', _stop, 'stop a program cleanly (the platform\'s kill as '
                                             'the fallback)'),
                             ('dashboard', _dashboard, 'forward a local port to a program\'s '
                                                       'dashboard; print its URL')):
        command = commands.add_parser(name, help=text, description=text[0].upper() + text[1:] + '.')
        command.add_argument('id', help='the program id that submit printed (see list)')
        command.set_defaults(main=main)
        if name == 'logs':
            command.add_argument('--node', help='only this node (label/index) or group (label)')
            command.add_argument('--grep', help='only lines matching this regular expression')
            command.add_argument('-f', '--follow', action='store_true',
                                 help='keep printing new lines until the program ends')
            command.add_argument('--since', help='only lines written since: a duration (90s, '
                                 '10m, 2h, 1d) or a UTC time (2026-11-26T06:40)')
            command.add_argument('--timestamps', action='store_true',
                                 help='show the UTC time each line was written')
        if name == 'dashboard':
            command.add_argument('--port', type=int, default=0,
                                 help='the local port (default: a free one)')
            command.add_argument('--ssh_options', help="for slurm: ssh arguments to reach the "
                                 "node, e.g. '-F my_config' (ssh: the submission's own)")
        if name == 'stop':
            command.add_argument('--grace', type=float, help='seconds nodes get to stop')
            command.add_argument('--timeout', type=float, default=60.0,
                                 help='seconds to wait for the clean stop before killing')
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.main(args)
    except records.UnknownProgramError as exc:
        print(f'error: {exc}', file=sys.stderr)
        return EXIT_UNKNOWN
    except (errors.LaunchpadError, OSError) as exc:
        print(f'error: {exc}', file=sys.stderr)
        return EXIT_FAILED
