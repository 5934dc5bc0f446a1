"""The launcher of one fault run: ``python fault_launcher.py LAUNCH_TYPE RUN_DIR [HOST ...]``.

Launches ``fault_nodes.make_program`` with ``fault_nodes.POLICIES``, and
while it runs appends every node process it sees to ``RUN_DIR/pids``
(``pid label index`` lines: what the fault injector picks victims from).
When the program ends it writes ``RUN_DIR/outcome.json``: how it ended,
when (``time.monotonic()``, the same clock in every process of this
machine), and each node's restarts. Under ssh, HOSTs run the groups; under
slurm, the test cluster's scheduler places them (logs under /tmp).
Flags after ``--`` go to absl (e.g. ``--lp_termination_notice_secs=2``).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time

from absl import app

import launchpad_py as lp
from launchpad_py.supervision import controller as controller_module
import fault_nodes


def record_pids(path: str, done: threading.Event) -> None:
    """Appends each node process of the running program to ``path`` once, as it appears."""
    seen = set()
    with open(path, 'a') as pids:
        while not done.wait(0.01):  # Polling: statuses change without announcing it.
            for program in controller_module.running_programs():
                for status in program.statuses():
                    if status.pid and status.pid not in seen:
                        seen.add(status.pid)
                        pids.write(f'{status.pid} {status.label} {status.index}\n')
                        pids.flush()


def _resources(launch_type: str, hosts: list[str]) -> dict | None:
    if launch_type == 'kubernetes':  # Pods of the image kube_faults names (a fake cluster).
        import kube_faults
        return kube_faults.resources(fault_nodes.make_program(''))
    if launch_type != 'ssh':
        return None
    options = ['-F', os.path.join(os.environ.get('LP_SSH_DIR', '/tmp/lp-ssh'), 'ssh_config')]
    env = {'LP_TEST_TOKEN': os.environ['LP_TEST_TOKEN']}
    machines = [lp.SshHost(host, ssh_options=options, env=env) for host in hosts]
    return {'params': machines[0], 'cache': machines[1 % len(machines)],
            'actor': machines, 'coordinator': machines[2 % len(machines)]}


def _options(launch_type: str, run_dir: str) -> dict:
    if launch_type != 'slurm':
        return {}
    return {'slurm_options': {'output_dir': os.path.join(run_dir, 'slurm-logs')}}


def run(launch_type: str, run_dir: str, hosts: list[str]) -> dict:
    done = threading.Event()
    recorder = threading.Thread(target=record_pids, args=(os.path.join(run_dir, 'pids'), done))
    recorder.start()
    outcome: dict = {'outcome': 'finished'}
    controller = None
    try:
        controller = lp.launch(fault_nodes.make_program(run_dir), launch_type=launch_type,
                               failure_policy=fault_nodes.POLICIES,
                               resources=_resources(launch_type, hosts),
                               **_options(launch_type, run_dir))
        controller.wait()
    except lp.NodeFailedError as exc:
        outcome = {'outcome': 'failed', 'label': exc.label, 'why': str(exc).splitlines()[0]}
    except lp.LaunchError as exc:
        found = re.search(r"node '(\w+)'", str(exc))
        outcome = {'outcome': 'failed', 'label': found.group(1) if found else None,
                   'why': str(exc).splitlines()[0]}
    outcome['ended_at'] = time.monotonic()
    done.set()
    recorder.join()
    if controller is not None:
        outcome['restarts'] = {f'{s.label}/{s.index}': s.restarts for s in controller.statuses()}
    return outcome


def main(argv: list[str]) -> None:
    launch_type, run_dir, hosts = argv[1], argv[2], argv[3:]
    outcome = run(launch_type, run_dir, hosts)
    with open(os.path.join(run_dir, 'outcome.json'), 'w') as f:
        json.dump(outcome, f)


if __name__ == '__main__':
    app.run(main)
