"""Launching the actor-learner example on share-nothing hosts: first launch, then cached.

The hosts are p1..p3 of ``scripts/private_hosts.sh`` (own /tmp, /home, python; the
checkout hidden). A "first" launch starts with every host's code cache emptied, so
the pack (this checkout's files less launchpad_py, as ``ship_code=True`` makes it
from here) crosses each agent's ssh session once; a "cached" launch finds it there
and sends nothing. The baseline is the same program on h1..h3, the same namespaces
sharing this filesystem, with nothing shipped. Each row: seconds from ``lp.launch``
to every node serving (median of ``--reps``; the first launch has one sample per
rep, each after emptying the caches), and bytes of code sent::

    python -m bench.share_nothing --json bench/share_nothing.json
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

import launchpad_py as lp
from examples.actor_learner.program import Config, make_program
from launchpad_py.launchers.remote import code_pack

PRIVATE = ['-F', os.path.join(os.environ.get('LP_PRIVATE_DIR', '/tmp/lp-private'), 'ssh_config')]
SHARED = ['-F', os.path.join(os.environ.get('LP_SSH_DIR', '/tmp/lp-ssh'), 'ssh_config')]


def _empty_caches() -> None:
    for host in ('p1', 'p2', 'p3'):
        subprocess.run(['ssh', *PRIVATE, host, 'rm -rf "$HOME/.cache/launchpad_py/code"'],
                       check=True, timeout=60)


def _launch_once(private: bool) -> tuple[float, int]:
    """Seconds until the program serves, and bytes of code sent, for one launch."""
    program = make_program(Config())
    names = ['p1', 'p2', 'p3'] if private else ['h1', 'h2', 'h3']
    extra = {'python': '/opt/lp/env/bin/python', 'ship_code': True} if private else {}
    resources = {group: lp.SshHost(names[i % 3], ssh_options=PRIVATE if private else SHARED,
                                   **extra) for i, group in enumerate(program.groups)}
    before = code_pack.statistics()['bytes_sent']
    start = time.perf_counter()
    controller = lp.launch(program, launch_type='ssh', resources=resources)
    ready = time.perf_counter() - start
    controller.stop(grace=5)
    return ready, code_pack.statistics()['bytes_sent'] - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--reps', type=int, default=3)
    parser.add_argument('--json', help='write the rows here')
    args = parser.parse_args()
    load_start = os.getloadavg()[0]
    rows = {'shared_fs_h': [], 'first_p': [], 'cached_p': []}
    for _ in range(args.reps):  # Interleaved, so drifting load hits every row alike.
        rows['shared_fs_h'].append(_launch_once(private=False))
        _empty_caches()
        rows['first_p'].append(_launch_once(private=True))
        rows['cached_p'].append(_launch_once(private=True))
    pack = code_pack.make(code_pack.user_paths())
    result = {
        'what': 'actor_learner example (learner, evaluator, 2 actors) launched over ssh: seconds '
                'from lp.launch to every node serving; bytes of code sent per launch',
        'pack': {'files_bytes': pack.files_bytes, 'gzip_bytes': len(pack.data),
                 'directories': list(pack.paths)},
        'rows': {name: {'ready_s_median': round(statistics.median(r for r, _ in samples), 3),
                        'ready_s': [round(r, 3) for r, _ in samples],
                        'code_bytes_sent': [b for _, b in samples]}
                 for name, samples in rows.items()},
        'load_1min_start_end': [load_start, os.getloadavg()[0]], 'reps': args.reps,
        'machine': '2 cores shared with other sessions; the namespace hosts share its CPUs',
        'command': 'python -m bench.share_nothing --json bench/share_nothing.json',
    }
    text = json.dumps(result, indent=2)
    if args.json:
        pathlib.Path(args.json).write_text(text + '\n')
    print(text)


if __name__ == '__main__':
    sys.exit(main())
