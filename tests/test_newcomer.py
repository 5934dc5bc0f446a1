"""A newcomer's first hour (issue 30): quiet clean stops, errors that blame the right node."""

from __future__ import annotations

import io
import json
import re
import os
import subprocess
import sys
import unittest

import pytest

import launchpad_py as lp

from conftest import REPO

SCRIPTS = os.path.join(REPO, 'tests', 'scripts')


def _run(script: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, os.path.join(SCRIPTS, script), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=REPO)


@pytest.mark.parametrize('launch_type', ['local_mt', 'local_mp', 'test_mp'])
def test_calls_cut_by_the_stop_end_quietly(launch_type):
    """Actors whose calls meet a learner already stopped end quietly: exit 0, status stopped."""
    result = _run('getting_started.py', launch_type)
    assert result.returncode == 0, result.stderr
    assert 'Traceback' not in result.stdout + result.stderr, result.stderr
    assert 'CourierUnavailableError' not in result.stderr, result.stderr
    statuses = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(statuses) == 5
    for label, index, state, exit_code in statuses:
        assert state in ('stopped', 'finished'), (label, index, state)
        assert exit_code in (0, None), (label, index, exit_code)


class Learner:
    def step(self):
        return 42


def _use(learner):
    return learner.step()


def _program_with_unadded_learner():
    program = lp.Program('agent')
    learner = lp.CourierNode(Learner).create_handle()  # The add_node was forgotten.
    program.add_node(lp.PyNode(_use, learner), label='actor')
    return program


def test_handle_of_a_node_never_added_is_caught_at_launch():
    """lp.launch names the node holding the handle and the node never added, and the fix."""
    with pytest.raises(lp.ProgramError) as caught:
        lp.launch(_program_with_unadded_learner(), launch_type='test_mt')
    message = str(caught.value)
    assert "'actor/0'" in message and 'CourierNode(Learner)' in message
    assert 'never added' in message and 'program.add_node(...)' in message


def test_graph_keeps_the_edge_to_a_node_never_added():
    """The picture shows the edge to the missing node instead of dropping it."""
    dot = _program_with_unadded_learner().to_dot()
    assert '"actor/0" -> "not added: CourierNode(Learner)"' in dot


def test_calling_a_handle_in_the_launching_script_explains_handles():
    """A node's method called on its handle says handles become clients, and what to call."""
    program = lp.Program('agent')
    learner = program.add_node(lp.CourierNode(Learner), label='learner')
    with pytest.raises(AttributeError) as caught:
        learner.step()
    message = str(caught.value)
    assert "'step'" in message and 'becomes a client' in message
    assert 'handle.dereference().step(...)' in message
    with lp.launch(program, launch_type='test_mt') as controller:
        assert learner.dereference().step() == 42  # The way the message gives works.
        controller.stop()


def test_lp_flags_count_without_app_run():
    """--lp_launch_type and --lp_dashboard work in a script that never calls absl's app.run."""
    result = _run('no_app_run.py', '--lp_launch_type=local_mp', '--lp_dashboard')
    assert result.returncode == 0, result.stderr
    assert 'node in another process: True' in result.stdout, result.stdout + result.stderr
    assert 'dashboard of program' in result.stdout + result.stderr


def test_unknown_lp_flag_is_named_in_a_warning():
    """An --lp_* argument that is no flag of ours is named, not silently dropped."""
    result = _run('no_app_run.py', '--lp_launch_typ=local_mp')
    assert result.returncode == 0, result.stderr
    assert '--lp_launch_typ=local_mp' in result.stderr and 'no such flag' in result.stderr


def test_bad_lp_flag_value_names_the_flag():
    """A bad value of one of our flags fails the launch, naming flag and value."""
    result = _run('no_app_run.py', '--lp_termination_notice_secs=soon')
    assert result.returncode != 0
    assert '--lp_termination_notice_secs' in result.stderr and "'soon'" in result.stderr


@pytest.mark.parametrize('launch_type', ['local_mt', 'local_mp'])
def test_failure_names_the_node_that_raised_first_and_each_traceback_once(launch_type):
    """A worker's method raising is blamed on the worker (label/index, method), then the caller."""
    result = _run('worker_raises.py', launch_type)
    assert result.returncode == 1
    output = result.stdout + result.stderr
    report = [line for line in output.splitlines() if 'NodeFailedError' in line][-1]
    assert report.index("node 'worker/1'") < report.index("'coordinator'"), report
    assert "method 'step'" in report and 'FloatingPointError' in report
    # The worker's frame and the coordinator's frame, once each.
    assert output.count("raise FloatingPointError('loss is nan')") == 1, output
    assert output.count('    worker.step()') == 1, output


def test_unknown_method_names_the_users_class_and_its_methods():
    """UnknownMethodError names the user's class and only the methods it has."""
    result = _run('worker_raises.py', 'test_mt', 'unknown')
    output = result.stdout + result.stderr
    assert 'UnknownMethodError' in output and "'stepp'" in output, output
    assert 'Worker served by' in output, output
    assert '_UnderConstruction' not in output, output
    offers = [line.rsplit('available: ', 1)[1] for line in output.splitlines()
              if 'available: ' in line]
    assert offers and set(offers) == {'step'}, offers  # No __call__: Worker has none.


def _one_node_program():
    program = lp.Program('small')
    program.add_node(lp.CourierNode(Learner), label='learner')
    return program


def test_resources_errors_name_the_keyword_the_user_gave():
    """Errors about resources= say resources=, not its older name local_resources."""
    with pytest.raises(lp.ResourcesError) as caught:
        lp.launch(_one_node_program(), launch_type='local_mt',
                  resources={'learner': lp.PythonProcess()})
    assert 'resources=' in str(caught.value) and 'local_resources' not in str(caught.value)
    with pytest.raises(lp.ResourcesError) as caught:
        lp.launch(_one_node_program(), launch_type='test_mp', resources={'learner': 'big'})
    assert "resources['learner']" in str(caught.value)
    assert 'local_resources' not in str(caught.value)


def test_example_script_states_the_step_budget_of_the_code():
    """scripts/example.sh and README give the example's real step budget (1.5 million)."""
    from examples.actor_learner.program import Config
    assert Config().max_env_steps == 1_500_000
    with open(os.path.join(REPO, 'scripts', 'example.sh')) as script:
        assert '1.5 million environment steps' in script.read()
    with open(os.path.join(REPO, 'README.md')) as readme:
        assert '1.5 million environment steps' in readme.read()


def test_prints_of_node_threads_are_labelled_and_whole():
    """Under local_mt, each printed line carries its node's [label/index] and lines never mix."""
    result = _run('threads_print.py', '--logtostderr')
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    talk = [line for line in lines if 'line' in line and 'talker' in line]
    assert len(talk) == 600, result.stdout[-2000:]
    for line in talk:
        match = re.fullmatch(r'\[talker/(\d)\] talker (\d) line \d+ x{40}', line)
        assert match and match.group(1) == match.group(2), line
    assert 'script done' in lines  # The script's own lines stay as they are.
    starts = [line for line in result.stderr.splitlines() if 'starts' in line]
    assert len(starts) == 3 and all(re.match(r'\[talker/\d\] [^\[]', s) for s in starts), starts


def test_dashboard_line_is_printed_once_under_app_run():
    """With absl's app.run (INFO logs on stderr), the dashboard's address appears once."""
    result = _run('threads_print.py', '--logtostderr')
    assert result.returncode == 0, result.stderr
    output = result.stdout + result.stderr
    assert output.count('dashboard of program') == 1, output[-3000:]


def _raise_once_stopped():
    lp.wait_for_stop(30)
    raise ValueError('the node broke while stopping')


def test_unittest_cleanup_reports_a_failure_that_comes_after_its_stop():
    """test_case=self: a node that raises after the cleanup's stop still fails the test."""

    class Quick(unittest.TestCase):
        def test_returns_at_once(self):
            program = lp.Program('quick')
            program.add_node(lp.PyNode(_raise_once_stopped), label='breaks')
            lp.launch(program, launch_type='test_mp', test_case=self)

    result = unittest.TextTestRunner(stream=io.StringIO()).run(Quick('test_returns_at_once'))
    problems = result.errors + result.failures
    assert len(problems) == 1, problems
    assert 'ValueError' in problems[0][1] and "'breaks'" in problems[0][1]
