"""Launcher behaviour beyond the conformance suite: terminal modes, resources, errors."""

from __future__ import annotations

import ast
import shutil
import threading
import unittest

import pytest

import launchpad_py as lp
from conftest import LAUNCH_TYPES, wait_for, wait_for_node_line
from nodes_for_tests import (BrokenConstructor, Greeter, SlowGreeter, Pinger, crash, hard_crash,
                             print_environment)


def _crashing_program(function=crash, *args):
    program = lp.Program('crashing')
    program.add_node(lp.CourierNode(Pinger), label='pinger')
    program.add_node(lp.PyNode(function, *args or ('boom',)), label='crasher')
    return program


TERMINALS = ['current_terminal', 'output_to_files', pytest.param(
    'tmux_session', marks=pytest.mark.skipif(not shutil.which('tmux'), reason='tmux not installed'))]


@pytest.mark.parametrize('terminal', TERMINALS)
def test_crash_detection_does_not_depend_on_the_terminal(terminal):
    """A raising node fails the program in every terminal mode."""
    controller = lp.launch(_crashing_program(), launch_type='local_mp', terminal=terminal)
    with pytest.raises(lp.NodeFailedError, match="'crasher'.*ValueError: boom"):
        controller.wait(timeout=60)


@pytest.mark.parametrize('terminal', TERMINALS)
def test_hard_crash_is_detected_with_its_exit_code(terminal):
    """A node process that dies without a Python exception is reported with its exit."""
    controller = lp.launch(_crashing_program(hard_crash, 3), launch_type='local_mp',
                           terminal=terminal)
    with pytest.raises(lp.NodeFailedError, match="'crasher'") as info:
        controller.wait(timeout=60)
    if terminal != 'tmux_session':  # tmux owns the process, so its exit code is not ours.
        assert 'exited with code 3' in str(info.value)
    assert 'about to crash' in str(info.value)


def test_output_to_files_writes_one_log_per_node(capsys):
    """output_to_files prints the log paths and each log holds its node's output."""
    program = lp.Program('logs')
    program.add_node(lp.PyNode(print_environment, ['LP_TEST_MARK']), label='printer')
    resources = {'printer': lp.PythonProcess(env={'LP_TEST_MARK': 'in-log'})}
    with lp.launch(program, launch_type='local_mp', terminal='output_to_files',
                   local_resources=resources) as controller:
        printed = capsys.readouterr().out
        path = printed.split('printer/0: ')[1].split()[0]
        wait_for(lambda: 'in-log' in open(path).read(), what='output in the log file')
    assert controller.statuses()[0].state == lp.NodeState.STOPPED
    assert "{'LP_TEST_MARK': 'in-log'}" in open(path).read()


def test_unknown_terminal_is_an_error():
    """A misspelled terminal mode lists the valid ones."""
    with pytest.raises(lp.ProgramError, match='current_terminal, output_to_files'):
        lp.launch(_crashing_program(), launch_type='local_mp', terminal='gnome')


def test_each_group_gets_its_own_environment():
    """local_resources env reaches only the processes of its group."""
    program = lp.Program('envs')
    names = ['LP_GROUP', 'CUDA_VISIBLE_DEVICES']
    program.add_node(lp.PyNode(print_environment, names), label='a')
    program.add_node(lp.PyNode(print_environment, names), label='b')
    resources = {'a': lp.PythonProcess(env={'LP_GROUP': 'a', 'CUDA_VISIBLE_DEVICES': '0'}),
                 'b': lp.PythonProcess(env={'LP_GROUP': 'b'})}
    controller = lp.launch(program, launch_type='test_mp', local_resources=resources)
    seen = {name: ast.literal_eval(wait_for_node_line(controller, name, '{'))
            for name in ('a/0', 'b/0')}
    controller.stop()
    assert seen['a/0'] == {'LP_GROUP': 'a', 'CUDA_VISIBLE_DEVICES': '0'}
    assert seen['b/0']['LP_GROUP'] == 'b'


@pytest.mark.parametrize('launch_type', LAUNCH_TYPES)
def test_constructor_failure_names_the_node_and_shows_its_output(launch_type, capfd):
    """A courier node whose constructor raises fails the program, named, with its traceback."""
    program = lp.Program('broken')
    program.add_node(lp.CourierNode(Greeter), label='fine')
    program.add_node(lp.CourierNode(BrokenConstructor), label='broken')
    controller = lp.launch(program, launch_type=launch_type)
    with pytest.raises(lp.NodeFailedError, match="node 'broken'.*constructor cannot start"):
        controller.wait(timeout=60)
    assert 'constructor output before failing' in capfd.readouterr().out


def test_node_dying_before_it_listens_fails_the_launch(tmp_path):
    """launch() raises LaunchError naming a node that died before listening, with its output."""
    interpreter = tmp_path / 'broken_python'
    interpreter.write_text('#!/bin/sh\necho "interpreter is broken"\nexit 3\n')
    interpreter.chmod(0o755)
    program = lp.Program('dead')
    program.add_node(lp.CourierNode(Greeter), label='fine')
    program.add_node(lp.CourierNode(Greeter), label='dead')
    resources = {'dead': lp.PythonProcess(interpreter=str(interpreter))}
    with pytest.raises(lp.LaunchError, match="node 'dead'.*failed to start.*exited with code 3") as info:
        lp.launch(program, launch_type='test_mp', local_resources=resources)
    assert 'interpreter is broken' in str(info.value)


def test_calls_wait_for_a_slow_constructor():
    """Servers listen before their object exists; early calls wait for it."""
    program = lp.Program('slow')
    handle = program.add_node(lp.CourierNode(SlowGreeter, 0.3), label='slow')
    with lp.launch(program, launch_type='test_mp'):
        assert handle.dereference().greet() == 'hello'


@pytest.mark.parametrize('launch_type', LAUNCH_TYPES)
def test_unpicklable_argument_names_node_and_argument(launch_type):
    """An argument that cannot be pickled is named with its node's label."""
    program = lp.Program('unpicklable')
    program.add_node(lp.CourierNode(Pinger), label='fine')
    program.add_node(lp.PyNode(print, threading.Lock(), end='x'), label='locked')
    with pytest.raises(lp.NodeSerializationError, match=r"argument 'args\[0\]' of node 'locked'"):
        lp.launch(program, launch_type=launch_type)


def test_local_mt_without_serialization_accepts_unpicklable_arguments():
    """serialize_py_nodes=False lets threads share objects that cannot be pickled."""
    lock = threading.Lock()
    program = lp.Program('shared')
    program.add_node(lp.PyNode(lock.acquire), label='locker')
    lp.launch(program, launch_type='test_mt', serialize_py_nodes=False).wait(timeout=30)
    assert lock.locked()


def test_unknown_launch_type_lists_known_ones():
    """The error names the bad value and every registered launcher."""
    with pytest.raises(lp.UnknownLaunchTypeError, match="'local_xyz'.*local_mp, local_mt"):
        lp.launch(_crashing_program(), launch_type='local_xyz')


def test_resources_for_unknown_group_are_an_error():
    """local_resources keys must be groups of the program."""
    with pytest.raises(lp.ResourcesError, match=r"\['learner'\].*\['crasher', 'pinger'\]"):
        lp.launch(_crashing_program(), launch_type='local_mp',
                  local_resources={'learner': lp.PythonProcess()})


def test_resources_keyword_is_checked_like_local_resources():
    """resources= is the general name: it reaches the same checks, and both at once is an error."""
    with pytest.raises(lp.ResourcesError, match=r"\['learner'\].*\['crasher', 'pinger'\]"):
        lp.launch(_crashing_program(), launch_type='local_mp',
                  resources={'learner': lp.PythonProcess()})
    with pytest.raises(lp.ResourcesError, match='not both'):
        lp.launch(_crashing_program(), launch_type='local_mp', resources={},
                  local_resources={})


def test_resources_given_to_threads_are_an_error():
    """local_mt cannot apply local_resources and says so."""
    with pytest.raises(lp.ResourcesError, match='local_mt .* cannot apply local_resources'):
        lp.launch(_crashing_program(), launch_type='local_mt',
                  local_resources={'pinger': lp.PythonProcess()})


def test_python_process_checks_its_fields():
    """PythonProcess rejects a string for args and non-string env values."""
    with pytest.raises(TypeError, match='list of strings'):
        lp.PythonProcess(args='--x=1')
    with pytest.raises(TypeError, match="'N': 3"):
        lp.PythonProcess(env={'N': 3})


@pytest.mark.parametrize('launch_type', ['test_mt', 'test_mp'])
def test_launch_from_a_non_main_thread(launch_type):
    """Notebooks and tuners launch from worker threads; that works."""
    program = lp.Program('threaded')
    handle = program.add_node(lp.CourierNode(Greeter), label='greeter')
    result = {}

    def launch_and_call():
        with lp.launch(program, launch_type=launch_type):
            result['answer'] = handle.dereference().greet()

    thread = threading.Thread(target=launch_and_call)
    thread.start()
    thread.join(60)
    assert result == {'answer': 'hello'}


@pytest.mark.parametrize('launch_type', LAUNCH_TYPES)
def test_servers_listen_when_launch_returns(launch_type):
    """After launch() returns, a call that does not wait for readiness succeeds."""
    program = lp.Program('ready')
    handle = program.add_node(lp.CourierNode(Greeter), label='greeter')
    with lp.launch(program, launch_type=launch_type):
        client = lp.courier.Client(handle.dereference().address, wait_for_ready=False, timeout=10)
        assert client.greet() == 'hello'


class _CaseWithFailingNode(unittest.TestCase):
    __test__ = False  # Run by the test below, which expects it to fail.

    def test_node_fails(self):
        lp.launch(_crashing_program(), launch_type='test_mt', test_case=self)
        lp.wait_for_stop(30)


def test_test_case_cleanup_reraises_node_failure():
    """With test_case=, a node failure fails the unittest test at cleanup."""
    result = unittest.TestResult()
    _CaseWithFailingNode('test_node_fails').run(result)
    assert len(result.errors) == 1
    assert 'NodeFailedError' in result.errors[0][1] and "'crasher'" in result.errors[0][1]


def test_node_specs_are_removed_once_read():
    """A node's spec (pickled code) does not stay on disk once its process has read it."""
    import glob
    from launchpad_py.courier.transports import uds
    program = lp.Program('spec_cleanup_check')
    program.add_node(lp.CourierNode(Greeter), label='spec_cleanup_check_greeter')
    pattern = f'{uds.runtime_dir()}/launch-*/spec_cleanup_check_greeter_0.spec'
    with lp.launch(program, launch_type='test_mp'):
        assert glob.glob(pattern) == []
