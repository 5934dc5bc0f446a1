"""The launcher of the soak: ``python soak_launcher.py RUN_DIR SECONDS``.

Launches ``soak_nodes.make_program`` under local_mp, records its node
processes in ``RUN_DIR/pids`` (as ``fault_launcher`` does, for the soak to
pick the node to kill), stops the program after SECONDS and writes
``RUN_DIR/outcome.json``.
"""

from __future__ import annotations

import json
import os
import threading

from absl import app

import launchpad_py as lp
import soak_nodes
from fault_launcher import record_pids


def main(argv: list[str]) -> None:
    run_dir, seconds = argv[1], float(argv[2])
    done = threading.Event()
    recorder = threading.Thread(target=record_pids, args=(os.path.join(run_dir, 'pids'), done))
    recorder.start()
    outcome = {'outcome': 'stopped'}
    try:
        controller = lp.launch(soak_nodes.make_program(run_dir), launch_type='local_mp',
                               failure_policy=soak_nodes.POLICIES)
        try:
            controller.wait(timeout=seconds)
            outcome = {'outcome': 'ended early'}
        except TimeoutError:
            controller.stop()
        outcome['restarts'] = {f'{s.label}/{s.index}': s.restarts for s in controller.statuses()}
    except lp.LaunchpadError as exc:
        outcome = {'outcome': 'failed', 'why': str(exc).splitlines()[0]}
    finally:
        done.set()
        recorder.join()
    with open(os.path.join(run_dir, 'outcome.json'), 'w') as f:
        json.dump(outcome, f)


if __name__ == '__main__':
    app.run(main)
