"""Program.to_dot() and ``python -m launchpad_py.cli.draw``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

import launchpad_py as lp
from launchpad_py.program import graph
from tests.conftest import REPO
from tests.observe_nodes import Counted, call_forever


def _program():
    program = lp.Program('drawn')
    server = program.add_node(lp.CourierNode(Counted), label='server')
    with program.group('client'):
        for _ in range(2):
            program.add_node(lp.PyNode(call_forever, server=server))
    return program


def _tool(*args, **kwargs):
    return subprocess.run([sys.executable, '-m', 'launchpad_py.cli.draw', *args], cwd=REPO,
                          capture_output=True, timeout=120, **kwargs)


def test_edges_follow_handles_from_caller_to_server():
    """Each node given a handle gets an edge to the node it points to, named by the argument."""
    edges = graph.structure(_program()).edges
    assert [(e.source, e.target, e.argument) for e in edges] == [
        ('client/0', 'server/0', 'server'), ('client/1', 'server/0', 'server')]


def test_dot_has_groups_as_clusters_and_node_types():
    """Groups are clusters (with their size), nodes carry their type."""
    dot = _program().to_dot()
    assert 'subgraph "cluster_1"' in dot and 'label="client ×2"' in dot
    assert '"client/0" [label="client/0\\nPyNode(call_forever)"]' in dot
    assert '"client/1" -> "server/0" [label="server"]' in dot


def test_dot_shows_group_resources_on_each_node():
    """Resources given to a group appear on its nodes, fields that differ from defaults only."""
    dot = _program().to_dot({'client': lp.PythonProcess(env={'ROLE': 'client'})})
    assert dot.count("env: ROLE='client'") == 2 and 'interpreter' not in dot


def test_colocated_nodes_receive_edges():
    """A handle to a node inside a colocation draws an edge to the colocation node."""
    program = lp.Program('colocated')
    inner = lp.CourierNode(Counted)
    program.add_node(lp.MultiThreadingColocation([inner]), label='pair')
    program.add_node(lp.PyNode(call_forever, inner.create_handle()), label='caller')
    assert [(e.source, e.target) for e in graph.structure(program).edges] == [
        ('caller/0', 'pair/0')]


def test_tool_draws_a_script_without_launching_it():
    """The script's own flags reach it; DOT comes out; no node runs (the script would raise)."""
    done = _tool('tests/graph_script.py', '--workers=3')
    assert done.returncode == 0, done.stderr.decode()
    dot = done.stdout.decode()
    assert 'label="client ×3"' in dot and "env: ROLE='client'" in dot


@pytest.mark.skipif(shutil.which('dot') is None,
                    reason="graphviz's dot is not installed (apt-get install graphviz)")
@pytest.mark.parametrize('extension, magic', [('svg', b'<svg'), ('png', b'\x89PNG')])
def test_tool_renders_svg_and_png(tmp_path, extension, magic):
    """-o picks the format by extension and renders with Graphviz."""
    out = tmp_path / f'graph.{extension}'
    done = _tool('-o', str(out), '-m', 'tests.graph_script')
    assert done.returncode == 0, done.stderr.decode()
    assert magic in out.read_bytes()[:400]


def test_tool_without_graphviz_says_how_to_install(tmp_path):
    """Asked for SVG where there is no dot, the tool names the install command."""
    env = dict(os.environ, PATH=os.path.dirname(sys.executable))
    done = _tool('-o', str(tmp_path / 'g.svg'), 'tests/graph_script.py', env=env)
    assert done.returncode == 2 and b'apt-get install graphviz' in done.stderr


def test_tool_on_a_script_that_never_launches(tmp_path):
    """A script that ends without lp.launch gets a clear message, not an empty picture."""
    script = tmp_path / 'quiet.py'
    script.write_text('print("hello")\n')
    done = _tool(str(script))
    assert done.returncode != 0 and b'without calling lp.launch' in done.stderr


def test_positional_handles_are_named_after_parameters():
    """A handle passed positionally is labelled with the target's parameter name."""
    program = lp.Program('positional')
    server = program.add_node(lp.CourierNode(Counted), label='server')
    program.add_node(lp.PyNode(call_forever, server), label='client')
    assert [e.argument for e in graph.structure(program).edges] == ['server']
