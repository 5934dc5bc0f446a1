"""Regenerates the pictures of docs/examples.md and docs/observability.md.

    .venv/bin/python scripts/observability_docs.py            # all of them
    .venv/bin/python scripts/observability_docs.py --graphs   # only the graph pictures
    .venv/bin/python scripts/observability_docs.py --overhead bench/observe_overhead.json

Graphs come from ``python -m launchpad_py.cli.draw`` run on each example's own
``__main__`` (so they are what that command would launch); the live pictures
come from the actor-learner example under ``local_mp`` with the dashboard on:
the ``python -m launchpad_py.cli.status`` table and a headless-Chromium screenshot
once the learner has served some calls, then a screenshot of a small program
whose node fails. Needs graphviz, chromium, chromium-driver and selenium.
``--overhead`` only writes the numbers of ``bench/observe_overhead.py``'s JSON
into the doc. Text blocks go between ``<!-- begin NAME -->`` and
``<!-- end NAME -->`` in docs/observability.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGES = os.path.join(REPO, 'docs', 'images')
DOC = os.path.join(REPO, 'docs', 'observability.md')
sys.path.insert(0, REPO)

EXAMPLES = {  # picture name -> module and flags
    'actor_learner': ['examples.actor_learner', '--lp_launch_type=local_mp'],
    'actor_learner_reverb': ['examples.actor_learner', '--lp_launch_type=local_mp',
                             '--replay=reverb'],
    'parameter_server_single': ['examples.parameter_server', '--lp_launch_type=local_mp'],
    'parameter_server_replicated': ['examples.parameter_server', '--lp_launch_type=local_mp',
                                    '--topology=replicated'],
    'parameter_server_cached': ['examples.parameter_server', '--lp_launch_type=local_mp',
                                '--topology=cached'],
    'mapreduce': ['examples.mapreduce', '--lp_launch_type=local_mp',
                  '--inputs=examples/mapreduce/*.py'],
    'evolution_strategies': ['examples.evolution_strategies', '--lp_launch_type=local_mp'],
}
# The Reverb variant builds only where dm-reverb is installed (scripts/test.sh's .venv-reverb).
REVERB_PYTHON = os.environ.get('LP_REVERB_PYTHON', os.path.join(REPO, '.venv-reverb', 'bin',
                                                                 'python'))


def fill_doc(name: str, text: str) -> None:
    """Replaces the block ``name`` of docs/observability.md with ``text``."""
    with open(DOC) as f:
        doc = f.read()
    pattern = re.compile(f'(<!-- begin {name} -->\n).*?(<!-- end {name} -->)', re.S)
    if not pattern.search(doc):
        raise SystemExit(f'{DOC} has no block {name!r}')
    with open(DOC, 'w') as f:
        f.write(pattern.sub(lambda m: m.group(1) + text + m.group(2), doc))
    print('filled', name, 'in', DOC)


def overhead(path: str) -> None:
    """The doc's overhead numbers, from a JSON report of bench/observe_overhead.py."""
    with open(path) as f:
        r = json.load(f)
    inside = r['in_process']
    quartiles = inside['ratio_quartiles']
    rows = [
        ('`tiny_sync`, µs per call, {} pairs of fresh server processes'.format(r['pairs']),
         f"{r['baseline_us']:.1f}", f"{r['current_us']:.1f}",
         f"{r['ratio_median']:.3f} (pairs {min(r['pair_ratios']):.3f}–"
         f"{max(r['pair_ratios']):.3f})"),
        ('one process, CPU µs per call (counters as no-ops, then on)',
         f"{inside['off_cpu_us']:.2f}", f"{inside['on_cpu_us']:.2f}",
         f"{inside['ratio_median']:.4f} (quartiles {quartiles[0]:.3f}–{quartiles[2]:.3f})"),
        ('the counters alone, per call', '', f"{r['hot_path_ns']:.0f} ns",
         f"{r['hot_path_share']:.2%} of a call"),
    ]
    counted = r.get('instructions')
    if counted:
        rows.append(('instructions per call in the serving thread (callgrind; caller: '
                     f"{counted['caller']:.0f})", f"{counted['server_baseline']:.0f}",
                     f"{counted['server_current']:.0f}",
                     f"+{counted['share']:.2%} of the call's user-space instructions; "
                     f"user time is {counted['user_us']:.1f} of "
                     f"{counted['user_us'] + counted['kernel_us']:.1f} CPU µs, so "
                     f"≈{counted['share_of_cpu']:.2%} of the CPU"))
    table = ['| measure | without statistics | with | ratio |', '|---|---|---|---|']
    table += ['| ' + ' | '.join(row) + ' |' for row in rows]
    fill_doc('overhead', f"Measured at commit `{r['current_commit'][:10]}` against "
                         f"`{r['baseline_ref']}` (`{r['baseline_commit'][:10]}`), {r['cpus']} "
                         f"CPUs, load average {r['load_average'][0]:.1f} at the end:\n\n"
                         + '\n'.join(table) + '\n')


def graphs() -> None:
    for name, (module, *flags) in EXAMPLES.items():
        python = REVERB_PYTHON if '--replay=reverb' in flags else sys.executable
        if not os.path.exists(python):
            print(f'skipped graph_{name}: no {python} (set LP_REVERB_PYTHON)')
            continue
        out = os.path.join(IMAGES, f'graph_{name}.svg')
        subprocess.run([python, '-m', 'launchpad_py.cli.draw', '-o', out, '-m', module, *flags],
                       cwd=REPO, check=True, timeout=300)
        print('wrote', out)
    png = os.path.join(IMAGES, 'graph_actor_learner.png')  # The PNG output, for observability.md.
    subprocess.run([sys.executable, '-m', 'launchpad_py.cli.draw', '-o', png, '-m',
                    'examples.actor_learner', '--lp_launch_type=local_mp'], cwd=REPO, check=True,
                   timeout=300)


def _browser():
    from selenium import webdriver
    options = webdriver.ChromeOptions()
    for argument in ('--headless=new', '--no-sandbox', '--disable-gpu', '--window-size=1400,1250'):
        options.add_argument(argument)
    options.binary_location = '/usr/bin/chromium'
    return webdriver.Chrome(options=options,
                            service=webdriver.ChromeService('/usr/bin/chromedriver'))


def _wait(predicate, timeout: float, what: str) -> None:
    pause, deadline = threading.Event(), time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f'timed out waiting for {what}')
        pause.wait(0.5)


def actor_learner_live(driver) -> None:
    import launchpad_py as lp
    from examples.actor_learner.program import Config, cpu_only_resources, make_program
    # An unreachable target, so the program runs until this script stops it.
    program = make_program(Config(num_actors=2, target_return=10_000, max_env_steps=10**9))
    controller = lp.launch(program, launch_type='local_mp', resources=cpu_only_resources(),
                           dashboard=True, terminal='output_to_files')
    try:
        def learner_busy():
            learner = next(n for n in controller.statistics() if n.name == 'learner/0')
            return (learner.calls or 0) > 300 and learner.uptime_s > 25
        _wait(learner_busy, 240, 'the learner to serve 300 calls')
        table = subprocess.run([sys.executable, '-m', 'launchpad_py.cli.status', 'actor_learner',
                                '--once'], cwd=REPO, capture_output=True, text=True, check=True)
        uptime = round(max(n.uptime_s for n in controller.statistics()))
        print(table.stdout)
        fill_doc('status-table', f'The actor-learner example (`local_mp`, 2 actors), {uptime} s '
                                 'after launch, as\n`scripts/observability_docs.py` captured it:'
                                 f'\n\n```\n{table.stdout.rstrip()}\n```\n')
        driver.get(controller.dashboard.url)
        _wait(lambda: driver.execute_script('return Number(document.body.dataset.polled || 0)') > 2,
              30, 'the page to poll')
        driver.save_screenshot(os.path.join(IMAGES, 'dashboard_actor_learner.png'))
    finally:
        controller.stop()
        controller.dashboard.close()


def failure_live(driver) -> None:
    import launchpad_py as lp
    from tests.observe_nodes import Bomb, Counted, call_forever
    program = lp.Program('failing_demo')
    server = program.add_node(lp.CourierNode(Counted), label='server')
    bomb = program.add_node(lp.CourierNode(Bomb), label='bomb')
    program.add_node(lp.PyNode(call_forever, server), label='client')
    controller = lp.launch(program, launch_type='local_mp', dashboard=True,
                           terminal='output_to_files')
    try:
        driver.get(controller.dashboard.url)
        _wait(lambda: driver.execute_script('return Number(document.body.dataset.polled || 0)') > 3,
              30, 'a few polls for the plots')
        bomb.dereference().futures.arm()  # Its reply may never come: the node dies.
        try:
            controller.wait(timeout=60)
        except lp.NodeFailedError:
            pass
        _wait(lambda: 'failed' in driver.find_element(
            'css selector', '.card[data-node="bomb/0"] .state').text, 30, 'the failure to show')
        driver.save_screenshot(os.path.join(IMAGES, 'dashboard_failure.png'))
    finally:
        controller.dashboard.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--graphs', action='store_true', help='only the graph pictures')
    parser.add_argument('--overhead', metavar='JSON', help='only the overhead numbers, from JSON')
    args = parser.parse_args()
    if args.overhead:
        overhead(args.overhead)
        return
    graphs()
    if args.graphs:
        return
    driver = _browser()
    try:
        actor_learner_live(driver)
        failure_live(driver)
    finally:
        driver.quit()


if __name__ == '__main__':
    main()
