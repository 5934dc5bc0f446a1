"""The docs match the code: quoted signatures, and every code block marked runnable.

A Python block in README.md or docs/ is marked runnable by an HTML comment on
the line before its opening fence::

    <!-- runnable: local_mt, local_mp; prints: final total: 100 -->

The block runs as a script once per launch type named, with
``--lp_launch_type=<type>`` and its own ``launch_type='...'`` set to that
type; it must exit 0 with no traceback, and print the promised text.
"""

from __future__ import annotations

import ast
import enum
import glob
import inspect
import os
import re
import subprocess
import sys

import pytest

import launchpad_py as lp
from conftest import REPO

DOCS = [os.path.join(REPO, 'README.md')] + sorted(glob.glob(os.path.join(REPO, 'docs', '*.md')))
_MARK = re.compile(r'<!-- runnable: ([\w, ]+?)(?:; prints: (.*?))? -->\n```python\n(.*?)```',
                   re.DOTALL)
_HEADING = re.compile(r'^### `lp\.(\w+)\((.*)\)`$', re.MULTILINE)


def _runnable_blocks():
    for path in DOCS:
        with open(path) as doc:
            text = doc.read()
        for match in _MARK.finditer(text):
            line = text[:match.start()].count('\n') + 1
            where = f'{os.path.relpath(path, REPO)}:{line}'
            for launch_type in match.group(1).replace(',', ' ').split():
                yield pytest.param(match.group(3), match.group(2), launch_type,
                                   id=f'{where}-{launch_type}')


def test_some_blocks_are_marked_runnable():
    """The check below is not vacuous: README and getting-started have runnable blocks."""
    ids = [param.id for param in _runnable_blocks()]
    assert any(i.startswith('README.md') for i in ids)
    assert any(i.startswith('docs/getting-started.md') for i in ids)


@pytest.mark.parametrize('code,promised,launch_type', list(_runnable_blocks()))
def test_runnable_block_runs_and_prints_what_it_promises(code, promised, launch_type, tmp_path):
    """A runnable block exits 0, prints no traceback, and prints the text the docs promise."""
    script = tmp_path / 'block.py'
    script.write_text(re.sub(r"launch_type='\w+'", f"launch_type='{launch_type}'", code))
    result = subprocess.run([sys.executable, str(script), f'--lp_launch_type={launch_type}'],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert 'Traceback' not in output, output
    if promised:
        assert promised in result.stdout, output


def _documented_signatures():
    with open(os.path.join(REPO, 'docs', 'api.md')) as doc:
        for name, params in _HEADING.findall(doc.read()):
            yield pytest.param(name, params, id=name)


def _shape(params: str) -> list[str]:
    """Parameter names in order, '*' marking where keyword-only ones start."""
    args = ast.parse(f'def f({params}): pass').body[0].args
    shape = [a.arg for a in args.posonlyargs + args.args]
    if args.vararg:
        shape.append('*' + args.vararg.arg)
    elif args.kwonlyargs:
        shape.append('*')
    shape += [a.arg for a in args.kwonlyargs]
    if args.kwarg:
        shape.append('**' + args.kwarg.arg)
    return shape


def _code_shape(signature: inspect.Signature) -> list[str]:
    shape, keyword_only = [], False
    for param in signature.parameters.values():
        if param.kind is param.VAR_POSITIONAL:
            shape.append('*' + param.name)
            keyword_only = True
        elif param.kind is param.VAR_KEYWORD:
            shape.append('**' + param.name)
        else:
            if param.kind is param.KEYWORD_ONLY and not keyword_only:
                shape.append('*')
                keyword_only = True
            shape.append(param.name)
    return shape


@pytest.mark.parametrize('name,params', list(_documented_signatures()))
def test_api_signature_matches_the_code(name, params):
    """Each `lp.name(...)` heading of docs/api.md lists the parameters the code takes, in order."""
    signature = inspect.signature(getattr(lp, name))
    assert _shape(params) == _code_shape(signature), (
        f'docs/api.md: lp.{name}({params})\ncode:        lp.{name}{signature}')


def test_launch_type_members_are_documented():
    """docs/api.md lists every lp.LaunchType member with its value."""
    with open(os.path.join(REPO, 'docs', 'api.md')) as doc:
        text = doc.read()
    section = text.split('### `lp.LaunchType`', 1)[1].split('###', 1)[0]
    listed = dict(re.findall(r"`(\w+)='(\w+)'`", section))
    assert listed == {member.name: member.value for member in lp.LaunchType}
    assert issubclass(lp.LaunchType, enum.Enum)


def test_troubleshooting_page_has_ten_messages_and_is_linked():
    """docs/troubleshooting.md lists ten messages, each with cause and fix; README links it."""
    with open(os.path.join(REPO, 'docs', 'troubleshooting.md')) as page:
        text = page.read()
    entries = re.split(r'^## \d+\. ', text, flags=re.MULTILINE)[1:]
    assert len(entries) == 10
    for entry in entries:
        assert '**Cause.**' in entry and '**Fix.**' in entry, entry[:80]
    with open(os.path.join(REPO, 'README.md')) as readme:
        assert '(docs/troubleshooting.md)' in readme.read()
