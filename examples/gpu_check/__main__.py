"""python -m examples.gpu_check: shows that only the learner's process holds GPU memory.

Needs an NVIDIA GPU, nvidia-smi and JAX with CUDA (pip install 'jax[cuda12]').
Without them it says what is missing and exits 0, so CI without a GPU passes.
Exit code 1 when an actor holds GPU memory or the learner holds none.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys

import launchpad_py as lp
from examples.gpu_check.program import RESOURCES, make_program

SKIP = 'gpu_check skipped: '


def _nvidia_smi(*query: str) -> list[list[str]]:
    result = subprocess.run(['nvidia-smi', *query, '--format=csv,noheader,nounits'],
                            capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise RuntimeError(result.stderr.strip() or result.stdout.strip())
    return [[cell.strip() for cell in line.split(',')] for line in result.stdout.splitlines()
            if line.strip()]


def _missing() -> str | None:
    """Why this machine cannot run the check, or None."""
    if shutil.which('nvidia-smi') is None:
        return 'no nvidia-smi on PATH (no NVIDIA GPU here)'
    try:
        if not _nvidia_smi('--query-gpu=index'):
            return 'nvidia-smi lists no GPU'
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        return f'nvidia-smi fails: {exc}'
    if importlib.util.find_spec('jax') is None:
        return "JAX is not installed; pip install 'jax[cuda12]'"
    return None


def main() -> int:
    reason = _missing()
    if reason:
        print(SKIP + reason)
        return 0
    program, handles = make_program()
    with lp.launch(program, launch_type='local_mp', local_resources=RESOURCES):
        reports = [handle.dereference().report() for handle in handles]
        apps = {int(pid): memory for pid, memory in
                _nvidia_smi('--query-compute-apps=pid,used_memory')}
    for report in reports:
        report['nvidia_smi_MiB'] = apps.get(report['pid'])
        print(report)
    unknown = sorted(set(apps) - {r['pid'] for r in reports})
    if unknown:
        print(f'other GPU processes (or pids from another PID namespace): {unknown}')
    learner, actors = reports[0], reports[1:]
    ok = learner['platform'] == 'gpu' and all(
        a['platform'] == 'cpu' and a['nvidia_smi_MiB'] is None for a in actors)
    print('only the learner holds GPU memory' if ok else 'FAILED: see the reports above')
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
