"""A node's absl logging behaves as in the launching script: format, level, flags, label."""

from __future__ import annotations

import os
import re

import pytest

from conftest import run_script

SCRIPT = '''
import sys
from absl import app, logging
import launchpad_py as lp


def say(where):
    logging.info('info from %s', where)
    logging.warning('warning from %s', where)
    logging.debug('debug from %s', where)


def main(_):
    say('script')
    program = lp.Program('logs')
    program.add_node(lp.PyNode(say, 'node'), label='talker')
    program.add_node(lp.MultiProcessingColocation([lp.PyNode(say, 'child')]), label='coloc')
    lp.launch(program, launch_type={launch_type!r}).wait(timeout=60)


if {app_run}:
    app.run(main)
else:
    main(None)
'''
LAUNCH_TYPES = ['local_mp', 'local_mt']
# Who logs, and the label its lines start with.
SOURCES = {'script': '', 'node': '[talker/0] ', 'child': '[coloc/0] '}
ABSL_LINE = r'{label}{letter}\d{{4}} [\d:.]+ +\d+ <string>:\d+\] {level} from {who}$'


def _run(launch_type: str, *args: str, app_run: bool = True) -> str:
    result = run_script(SCRIPT.format(launch_type=launch_type, app_run=app_run), *args)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout + result.stderr


def _absl_line(output: str, who: str, level: str) -> bool:
    pattern = ABSL_LINE.format(label=re.escape(SOURCES[who]), letter=level[0].upper(),
                               level=level, who=who)
    return re.search(pattern, output, re.MULTILINE) is not None


@pytest.mark.parametrize('launch_type', LAUNCH_TYPES)
def test_with_app_run_nodes_log_info_in_absl_format(launch_type):
    """Under app.run, nodes and colocated children print info and warnings as the script does."""
    output = _run(launch_type)
    for who in SOURCES:
        assert _absl_line(output, who, 'info'), (who, output)
        assert _absl_line(output, who, 'warning'), (who, output)
    assert 'WARNING:absl:' not in output and 'debug from' not in output


@pytest.mark.parametrize('launch_type', LAUNCH_TYPES)
def test_without_app_run_nodes_log_as_the_script_does(launch_type):
    """Without app.run, nodes keep Python's defaults like the script: warnings only, labelled."""
    output = _run(launch_type, app_run=False)
    for who, label in SOURCES.items():
        assert re.search(rf'^{re.escape(label)}WARNING:absl:warning from {who}$', output,
                         re.MULTILINE), (who, output)
    assert 'info from' not in output


@pytest.mark.parametrize('launch_type', LAUNCH_TYPES)
def test_verbosity_flag_reaches_nodes(launch_type):
    """--verbosity=-1 hides info everywhere; --verbosity=1 shows debug everywhere."""
    quiet = _run(launch_type, '--verbosity=-1')
    assert 'info from' not in quiet
    assert all(_absl_line(quiet, who, 'warning') for who in SOURCES), quiet
    verbose = _run(launch_type, '--verbosity=1')
    assert all(re.search(rf'^{re.escape(label)}I.*\] debug from {who}$', verbose, re.MULTILINE)
               for who, label in SOURCES.items()), verbose


def test_log_dir_gives_each_node_process_its_log_file(tmp_path):
    """--log_dir: each node process writes its absl log to a file named after it there."""
    output = _run('local_mp', f'--log_dir={tmp_path}')
    assert 'info from node' not in output and 'info from child' not in output
    logs = {name: (tmp_path / name).read_text() for name in os.listdir(tmp_path)
            if not os.path.islink(tmp_path / name)}
    assert any(name.startswith('talker.0.') and 'info from node' in text
               for name, text in logs.items()), logs
    assert any(name.startswith('coloc.0.') and 'info from child' in text
               for name, text in logs.items()), logs


def test_logtostderr_keeps_logs_on_the_terminal_despite_log_dir(tmp_path):
    """--logtostderr wins over --log_dir, in nodes as in absl applications."""
    output = _run('local_mp', f'--log_dir={tmp_path}', '--logtostderr')
    assert _absl_line(output, 'node', 'info') and _absl_line(output, 'child', 'info'), output
