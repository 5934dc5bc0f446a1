"""Holds a Slurm allocation for as long as its launcher lives: ``python _slurm_hold.py salloc ...``.

Run by path, not as a module, so it starts without importing launchpad_py
(standard library only). salloc's command is a holder that prints a line once
the job is granted, then holds the allocation until its stdin ends; this
process keeps that stdin open and passes the holder's output on. When the
launcher is gone (our stdin ends, also when it was SIGKILLed) or done with
the job: a granted job's holder gets end-of-file, so salloc gives the job back
as completed; salloc waiting for a pending job gets SIGTERM, which cancels it.
Should salloc itself be killed, the job it held is cancelled.
"""

import os
import signal
import subprocess
import sys
import threading

_TIMEOUT_S = 30


def _pass_output_on(salloc: subprocess.Popen, granted: list) -> None:
    for line in salloc.stdout:
        granted.append(line.split()[1])  # 'LPJOB <job id> <nodes>'
        sys.stdout.write(line)
        sys.stdout.flush()


def _release_when_launcher_is_done(salloc: subprocess.Popen, granted: list) -> None:
    while os.read(0, 4096):
        pass
    salloc.stdin.close()
    if not granted:
        salloc.send_signal(signal.SIGTERM)
    try:
        salloc.wait(_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        salloc.kill()


def main() -> int:
    salloc = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    granted: list[str] = []  # The job id, once salloc's command says it.
    output = threading.Thread(target=_pass_output_on, args=(salloc, granted))
    output.start()
    threading.Thread(target=_release_when_launcher_is_done, args=(salloc, granted),
                     daemon=True).start()
    code = salloc.wait()
    if code < 0 and granted:  # salloc itself was killed: its job would outlive it.
        subprocess.run(['scancel', granted[0]], timeout=_TIMEOUT_S, check=False)
    output.join(_TIMEOUT_S)
    return code


if __name__ == '__main__':
    sys.exit(main())
