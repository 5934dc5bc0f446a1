"""Growing and shrinking a worker group while its program runs (the examples' ``--elastic``).

    controller = lp.launch(program, launch_type='local_mp')
    resize_while_running(controller, 'evaluator', sizes=[6, 2, 4], interval_s=2.0)

The group must be elastic (``program.group('evaluator', elastic=True)``);
new members copy its first node, leaving ones are the newest.
"""

from __future__ import annotations

import launchpad_py as lp


def live_members(controller: lp.ProgramController, label: str) -> int:
    """How many nodes of group ``label`` are starting, running or about to restart."""
    live = (lp.NodeState.STARTING, lp.NodeState.RUNNING, lp.NodeState.RESTARTING)
    return sum(1 for s in controller.statuses() if s.label == label and s.state in live)


def resize_while_running(controller: lp.ProgramController, label: str, sizes: list[int],
                         interval_s: float) -> list[int]:
    """Every ``interval_s`` moves group ``label`` to the next of ``sizes`` (round and round)
    until the program ends, which it then waits for (raising its failure, as ``wait`` does).
    Returns the sizes it set, in order."""
    done: list[int] = []
    while True:
        try:
            controller.wait(timeout=interval_s)
            return done
        except TimeoutError:  # Still running: time for the next size.
            pass
        size, live = sizes[len(done) % len(sizes)], live_members(controller, label)
        try:
            if size > live:
                print(f'elastic: adding {size - live} to group {label!r}', flush=True)
                controller.add_nodes(label, size - live)
            elif size < live:
                print(f'elastic: removing {live - size} from group {label!r}', flush=True)
                controller.remove_nodes(label, live - size)
        except (lp.NotRunningError, lp.LaunchError) as exc:
            # The program is stopping (wait() will say how), or a new node failed to start
            # (its group's policy decides): resizing goes on while the program does.
            print(f'elastic: {exc}', flush=True)
            continue
        done.append(size)
