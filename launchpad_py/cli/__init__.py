"""Command-line tools over a program or a running one: the top floor, beside ``compat``.

    python -m launchpad_py.cli.draw my_script.py -o program.svg   # the graph, nothing launched
    python -m launchpad_py.cli.status [NAME]                       # a live table of nodes

May import anything in the package; nothing in the package imports this folder.
"""
