"""The process a submitted program's controller lives in, on the host where the program runs.

    python -m launchpad_py.submission.controller_main DIR             # run (sbatch's batch step)
    python -m launchpad_py.submission.controller_main --detach DIR    # ssh: unpack stdin, detach
    python -m launchpad_py.submission.controller_main --supervise DIR # ssh: restart it N times
    python -m launchpad_py.submission.controller_main --kubernetes    # a Job's pod

It reads the record and the secret from DIR (0600 files: the secret never
rides on a command line), opens the endpoint ``status``/``logs``/``stop``
reach, and runs the user's script as ``python script.py args`` would (or
launches the pickled program of ``lp.submit``). Its output, node lines
included, goes to DIR/controller.log, each line after its time (``stamps``). When the script ends it waits for the
programs the script launched, then writes DIR/result.json (the exit code).

The controller is an ordinary ``lp.launch`` controller, so its guarantees hold:
if this process dies, the nodes' channels to it end and every node ends.
``--detach`` is for ssh: the ssh session brings the record and secret on
stdin, and the controller is started in a session of its own (``setsid``)
with its output in a file, so it survives the ssh connection; with
``controller_restarts`` N, a supervising process (``--supervise``) starts it
and starts it again, up to N times, when it fails or dies (not when stopped).
``--kubernetes`` copies what the pod has mounted (``kubernetes_objects``) to a
private directory and runs there, its output the pod's log.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import runpy
import signal
import stat
import subprocess
import sys
import time
import traceback

from absl import flags as absl_flags

from launchpad_py import flags
from launchpad_py.node_side import checkpoints
from launchpad_py.submission import endpoint, records, stamps
from launchpad_py.submission.records import LOG, PID_MARK, PROGRAM, RESULT

from launchpad_py.supervision import controller as controllers

#: The program directory's folder for its nodes' checkpoints (``lp.checkpoint_dir()``).
CHECKPOINTS = 'checkpoints'
#: Set by ``--supervise`` for the controller it starts: how many more times it would.
RESTARTS_LEFT_ENV = 'LAUNCHPAD_PY_CONTROLLER_RESTARTS_LEFT'
_MODULE = 'launchpad_py.submission.controller_main'


def run(directory: str) -> int:
    records.check_private(os.lstat(directory), directory, stat.S_ISDIR, 0o700)
    record = json.loads(records.read_private(os.path.join(directory, records.RECORD)))
    secret = bytes.fromhex(records.read_private(os.path.join(directory, records.SECRET)).strip())
    sys.stdout, sys.stderr = stamps.Stamped(sys.stdout), stamps.Stamped(sys.stderr)
    # Nodes find what they saved here again after a requeue (and their restarts, as ever).
    os.environ.setdefault(checkpoints.ROOT_ENV, os.path.join(directory, CHECKPOINTS))
    restarts = int(os.environ.get('SLURM_RESTART_COUNT') or 0)
    if restarts:  # A requeued job: what the last allocation wrote, if anything, is old news.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(directory, RESULT))
    door = endpoint.Endpoint(secret, directory)
    print(f'launchpad_py: program {record["id"]} controller (pid {os.getpid()}) on '
          f'{door.host}:{door.port}' + (f', in the job requeued {restarts} time(s)'
                                        if restarts else ''), flush=True)
    ended_by = _on_signals(record)
    code = 1
    try:
        code = _run_program(record, directory)
    finally:
        for program in controllers.running_programs():  # What the script launched and left.
            program.wait_quietly()
        if _final(code, ended_by, record):
            records.write_private(os.path.join(directory, RESULT), json.dumps(
                {'exit_code': code, 'ended': time.time()}), replace=True)
        door.close()
    return code


def _final(code: int, ended_by: list[str], record: dict) -> bool:
    """Whether this run's end is the program's: not when it comes back (a requeued job, or
    a failed controller its supervisor restarts)."""
    if ended_by:
        return not record.get('requeue')
    return code == 0 or not int(os.environ.get(RESTARTS_LEFT_ENV) or 0)


def _on_signals(record: dict) -> list[str]:
    """SIGTERM (Slurm's preemption, requeue or cancel; a pod's deletion) stops the programs
    gracefully, so every node's checkpoint hooks run before the scheduler's SIGKILL, instead
    of this process dying at once and its nodes with it; with ``signal_s``, SIGUSR2 (the time
    limit is near) requeues the job, which brings that SIGTERM. Returns the signals seen."""
    seen: list[str] = []

    def stop(signum, frame) -> None:
        seen.append(signal.Signals(signum).name)
        running = controllers.running_programs()
        if not running:  # Nothing launched yet: the script ends here.
            raise SystemExit(128 + signum)
        print(f'launchpad_py: {seen[-1]}: stopping the program (checkpoints first)', flush=True)
        for program in running:
            program.request_stop()

    def requeue(signum, frame) -> None:
        print(f'launchpad_py: the time limit is {record["signal_s"]} s away: requeueing job '
              f'{os.environ.get("SLURM_JOB_ID")}', flush=True)
        subprocess.Popen(['scontrol', 'requeue', os.environ.get('SLURM_JOB_ID', '')])

    signal.signal(signal.SIGTERM, stop)
    if record.get('signal_s'):
        signal.signal(signal.SIGUSR2, requeue)
    return seen


def _run_program(record: dict, directory: str) -> int:
    try:
        if record.get('program_launch_type'):  # The default of a script's lp.launch(p).
            absl_flags.FLAGS.set_default(flags.LAUNCH_TYPE.name, record['program_launch_type'])
        if record.get('script'):
            script = record['script']
            sys.argv = [script, *record.get('args', [])]
            sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
            runpy.run_path(script, run_name='__main__')
        else:
            _launch_pickled(os.path.join(directory, PROGRAM))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # Shown in the log, where `logs` finds it; the exit code says it.
        traceback.print_exc()
        return 1
    return 0


def _launch_pickled(path: str) -> None:
    import cloudpickle

    from launchpad_py.launchers.launch import launch
    with open(path, 'rb') as source:
        program, kwargs = cloudpickle.load(source)
    launch(program, **kwargs).wait()


def detach(directory: str) -> int:
    """Writes what stdin brings (record, secret, program) to ``directory``, starts ``run`` there
    in a session of its own, and prints its pid."""
    payload = json.loads(sys.stdin.read())
    os.makedirs(directory, mode=0o700, exist_ok=True)
    records.check_private(os.lstat(directory), directory, stat.S_ISDIR, 0o700)
    records.write_private(os.path.join(directory, records.SECRET), payload['secret'], replace=True)
    records.write_private(os.path.join(directory, records.RECORD),
                          json.dumps(payload['record'], indent=1), replace=True)
    if payload.get('program'):
        records.write_private(os.path.join(directory, PROGRAM),
                              base64.b64decode(payload['program']), replace=True)
    log = os.open(os.path.join(directory, LOG), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    mode = ['--supervise'] if payload['record'].get('controller_restarts') else []
    process = subprocess.Popen(
        [sys.executable, '-u', '-m', _MODULE, *mode, directory],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
        cwd=payload['record'].get('cwd') or None)
    print(f'{PID_MARK}{process.pid}', flush=True)
    return 0


def supervise(directory: str) -> int:
    """Runs the controller, and again after it fails or dies, up to the record's
    ``controller_restarts`` times; not after a stop (exit 0, or SIGTERM to this group)."""
    record = json.loads(records.read_private(os.path.join(directory, records.RECORD)))
    left, stopping = int(record.get('controller_restarts') or 0), []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
    while True:
        child = subprocess.Popen([sys.executable, '-u', '-m', _MODULE, directory],
                                 env=dict(os.environ, **{RESTARTS_LEFT_ENV: str(left)}))
        code = child.wait()
        code = code if code >= 0 else 128 - code  # Killed by a signal, as a shell says it.
        if code == 0 or stopping or left == 0:
            break
        left -= 1
        print(f'launchpad_py: the controller (pid {child.pid}) ended with exit code {code}: '
              f'starting it again ({left} restart(s) left); the program starts from its '
              'checkpoints', flush=True)
    if not os.path.exists(os.path.join(directory, RESULT)):  # It died without a word.
        records.write_private(os.path.join(directory, RESULT), json.dumps(
            {'exit_code': code, 'ended': time.time()}), replace=True)
    return code


def in_pod() -> int:
    """In a submitted program's pod: copies the mounted record, secret and script (or
    program) to a private directory, makes this controller's Job the owner of what it
    launches, and runs there."""
    import tempfile

    from launchpad_py.launchers.kubernetes import manifests
    from launchpad_py.submission.platforms import kubernetes_objects as objects
    mounted = os.environ[objects.MOUNT_ENV]
    directory = tempfile.mkdtemp(prefix='launchpad-py-controller-')  # 0700, ours.
    for name in os.listdir(mounted):
        if not name.startswith('.'):  # The kubelet's own links (..data) are not ours.
            with open(os.path.join(mounted, name), 'rb') as source:
                records.write_private(os.path.join(directory, name), source.read())
    record = json.loads(records.read_private(os.path.join(directory, records.RECORD)))
    if os.path.exists(os.path.join(directory, objects.SCRIPT)):
        record['script'] = os.path.join(directory, objects.SCRIPT)
    records.write_private(os.path.join(directory, records.RECORD), json.dumps(record),
                          replace=True)
    os.environ[manifests.OWNER_ENV] = json.dumps(record['owner'])
    return run(directory)


def main(argv: list[str]) -> int:
    if argv[:1] in (['--detach'], ['--supervise']) and len(argv) == 2:
        return (detach if argv[0] == '--detach' else supervise)(argv[1])
    if argv == ['--kubernetes']:
        return in_pod()
    if len(argv) == 1:
        return run(argv[0])
    print('usage: python -m launchpad_py.submission.controller_main '
          '[--detach|--supervise] DIR | --kubernetes', file=sys.stderr)
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
