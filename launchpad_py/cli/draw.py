"""``python -m launchpad_py.cli.draw``: draw the program a script would launch, without launching it.

    python -m launchpad_py.cli.draw my_script.py --lp_launch_type=local_mp      # DOT on stdout
    python -m launchpad_py.cli.draw -o program.svg -m examples.actor_learner --num_actors=4

The script runs as usual up to its first ``lp.launch(...)``; that call hands the
program (and the resources it was given) to this tool instead, which writes
``Program.to_dot()`` and, for ``.svg``/``.png``, renders it with Graphviz's ``dot``.
No node is started.
"""

from __future__ import annotations

import argparse
import os
import runpy
import shutil
import subprocess
import sys

import launchpad_py
from launchpad_py import launchers

FORMATS = ('dot', 'svg', 'png')
INSTALL_HINT = ("Graphviz's `dot` is needed for {fmt} output and is not installed: "
                'apt-get install graphviz (Debian/Ubuntu), brew install graphviz (macOS), '
                'or write DOT with -o program.dot and render it elsewhere')


class _Captured(BaseException):
    """Unwinds the script at its lp.launch call (BaseException: its ``except Exception`` misses it)."""

    def __init__(self, programs, resources):
        super().__init__('captured')
        self.programs, self.resources = programs, resources


def _capture(programs, launch_type=None, xm_resources=None, local_resources=None, *args,
             resources=None, **kwargs):
    raise _Captured(programs, resources if resources is not None else local_resources)


def capture(target: str, args: list[str], module: bool = False):
    """Runs ``target`` (a path, or a module with ``module=True``) until it calls lp.launch.

    Returns ``(programs, resources)`` as that call received them.
    """
    saved = sys.argv, launchpad_py.launch, launchers.launch
    sys.argv = [target] + list(args)
    launchpad_py.launch = launchers.launch = _capture
    if not module:
        sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
    try:
        if module:
            runpy.run_module(target, run_name='__main__', alter_sys=True)
        else:
            runpy.run_path(target, run_name='__main__')
    except _Captured as captured:
        return captured.programs, captured.resources
    finally:
        sys.argv, launchpad_py.launch, launchers.launch = saved
    raise SystemExit(f'{target} ended without calling lp.launch(...): nothing to draw')


def render(dot_text: str, fmt: str) -> bytes:
    """``dot_text`` as ``fmt`` ('dot', 'svg' or 'png')."""
    if fmt == 'dot':
        return dot_text.encode()
    binary = shutil.which('dot')
    if binary is None:
        raise RuntimeError(INSTALL_HINT.format(fmt=fmt.upper()))
    done = subprocess.run([binary, f'-T{fmt}'], input=dot_text.encode(), capture_output=True,
                          timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f'dot failed: {done.stderr.decode(errors="replace")}')
    return done.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog='python -m launchpad_py.cli.draw',
        description='Draw the program a script would launch (groups, nodes, handles passed).')
    parser.add_argument('-o', '--output', help='write here; the format follows the extension '
                        '(.dot, .svg, .png); default: DOT on stdout')
    parser.add_argument('--format', choices=FORMATS, help='override the output format')
    parser.add_argument('-m', dest='module', action='store_true',
                        help='the target is a module name (as python -m), not a path')
    parser.add_argument('target', help='the launching script (or module with -m)')
    parser.add_argument('args', nargs=argparse.REMAINDER, help="the script's own flags")
    options = parser.parse_args(argv)
    fmt = options.format or (os.path.splitext(options.output)[1].lstrip('.').lower()
                             if options.output else 'dot')
    if fmt not in FORMATS:
        parser.error(f'unknown output format {fmt!r}; use one of {", ".join(FORMATS)}')
    programs, resources = capture(options.target, options.args, options.module)
    programs = programs if isinstance(programs, (list, tuple)) else [programs]
    text = ''.join(p.to_dot(resources) for p in programs)
    try:
        data = render(text, fmt)
    except RuntimeError as exc:
        print(f'launchpad_py.cli.draw: {exc}', file=sys.stderr)
        return 2
    if options.output:
        with open(options.output, 'wb') as out:
            out.write(data)
    else:
        sys.stdout.buffer.write(data)
    return 0


if __name__ == '__main__':
    sys.exit(main())
