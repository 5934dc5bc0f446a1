"""Draws the package's map from its imports: docs/images/architecture.svg and the folder table
between the markers in docs/architecture.md.

    .venv/bin/python scripts/architecture.py           # rewrite both
    .venv/bin/python scripts/architecture.py --check   # exit 1 if the table is out of date

One box per folder (its module count), one arrow per folder it imports, read by grimp
(import-linter's graph, type-only imports included) so the picture is what the layer
contracts in pyproject.toml check. Graphviz's ``dot`` renders it.
"""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys

import grimp

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = 'launchpad_py'
DOC = os.path.join(REPO, 'docs', 'architecture.md')
PICTURE = os.path.join(REPO, 'docs', 'images', 'architecture.svg')
BEGIN, END = '<!-- map: begin (scripts/architecture.py) -->', '<!-- map: end -->'


def folder_of(module: str) -> str:
    """``launchpad_py.launchers.ssh.host`` -> ``launchers/ssh``; root modules -> ``(root)``."""
    parts = module.split('.')[1:]
    path = os.path.join(REPO, PACKAGE, *parts)
    if os.path.isdir(path):
        return '/'.join(parts) or '(root)'
    return '/'.join(parts[:-1]) or '(root)'


def folders() -> dict[str, list[str]]:
    """Folder -> its modules' file names, for every package folder."""
    found = {}
    for directory, subdirectories, files in os.walk(os.path.join(REPO, PACKAGE)):
        subdirectories[:] = sorted(d for d in subdirectories if d != '__pycache__')
        relative = os.path.relpath(directory, os.path.join(REPO, PACKAGE)).replace(os.sep, '/')
        found['(root)' if relative == '.' else relative] = sorted(
            f for f in files if f.endswith('.py'))
    return found


def purpose(folder: str) -> str:
    """The first line of the folder's ``__init__`` docstring."""
    path = os.path.join(REPO, PACKAGE, '' if folder == '(root)' else folder, '__init__.py')
    with open(path) as f:
        docstring = ast.get_docstring(ast.parse(f.read())) or ''
    return docstring.split('\n\n')[0].replace('\n', ' ')


def folder_imports() -> dict[str, set[str]]:
    """Folder -> the folders its modules import (the root package's own __init__ left out:
    it is the public surface, importing everything by design)."""
    graph = grimp.build_graph(PACKAGE, exclude_type_checking_imports=False)
    edges: dict[str, set[str]] = {}
    for importer in graph.modules:
        if importer == PACKAGE:
            continue
        for imported in graph.find_modules_directly_imported_by(importer):
            source, target = folder_of(importer), folder_of(imported)
            if imported != PACKAGE and source != target:
                edges.setdefault(source, set()).add(target)
    return edges


def table(found: dict[str, list[str]], edges: dict[str, set[str]]) -> str:
    lines = [BEGIN, '', '| folder | modules | imports | holds |', '|---|---|---|---|']
    for folder, files in found.items():
        imports = ', '.join(sorted(edges.get(folder, ()))) or '—'
        lines.append(f'| `{folder}` | {len(files)} | {imports} | {purpose(folder)} |')
    return '\n'.join(lines + ['', END])


def dot(found: dict[str, list[str]], edges: dict[str, set[str]]) -> str:
    lines = ['digraph launchpad_py {', '  rankdir=BT; node [shape=box, fontname="Helvetica"];']
    for folder, files in found.items():
        lines.append(f'  "{folder}" [label="{folder}\\n{len(files)} modules"];')
    for source in sorted(edges):
        for target in sorted(edges[source]):
            lines.append(f'  "{source}" -> "{target}";')
    return '\n'.join(lines + ['}']) + '\n'


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--check', action='store_true', help='fail if the table is out of date')
    check = parser.parse_args().check
    found, edges = folders(), folder_imports()
    with open(DOC) as f:
        text = f.read()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    updated = text[:start] + table(found, edges) + text[end:]
    if check:
        if updated != text:
            print(f'{DOC} is out of date: run python scripts/architecture.py', file=sys.stderr)
            return 1
        return 0
    with open(DOC, 'w') as f:
        f.write(updated)
    svg = subprocess.run(['dot', '-Tsvg'], input=dot(found, edges), capture_output=True,
                         text=True, check=True).stdout
    with open(PICTURE, 'w') as f:
        f.write(svg)
    return 0


if __name__ == '__main__':
    sys.exit(main())
