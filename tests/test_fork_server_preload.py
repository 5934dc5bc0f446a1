"""The fork server's warm interpreter holds every module the public API loads.

``import launchpad_py`` resolves its public names lazily, so a fork server that only
imported the package would leave each forked node to import the node types, the courier
server and the rest after the fork: a 300-node ``local_mp`` launch took 11.3 s instead of
about 4 s (bench/scale_partial38.json).
"""

import subprocess
import sys

from conftest import REPO

_LIST = "import sys; print(' '.join(sorted(sys.modules)))"


def _modules(code: str) -> set[str]:
    return {m for m in _all_modules(code) if m.startswith('launchpad_py')}


def _all_modules(code: str) -> set[str]:
    """The modules loaded in a fresh interpreter once it ran ``code``."""
    done = subprocess.run([sys.executable, '-c', code + '\n' + _LIST], capture_output=True,
                          text=True, timeout=120, cwd=REPO, check=True)
    return set(done.stdout.split())


def test_preload_holds_every_module_of_the_public_api():
    public = _modules('import launchpad_py as lp\nfor n in lp.__all__: getattr(lp, n)')
    preloaded = _modules('from launchpad_py.node_side import fork_server\nfork_server.preload()')
    assert 'launchpad_py.nodes.courier_node' in public
    assert public - preloaded == set()


def test_a_served_node_imports_no_library_module_after_its_fork():
    """A forked courier node, served and called, has imported no module of launchpad_py, grpc
    or the standard library's futures that the fork server lacks.

    What a node imports after its fork is memory of its own: grpc's server modules, imported
    by each node when it made its server, were 2 of a node's 9 MiB of unique memory.
    """
    import launchpad_py as lp
    from process_nodes import Describe
    program = lp.Program('after_fork')
    handle = program.add_node(lp.CourierNode(Describe), label='node')
    with lp.launch(program, launch_type='local_mp', terminal='output_to_files'):
        in_node = set(handle.dereference().modules())
    preloaded = _all_modules('from launchpad_py.node_side import fork_server\nfork_server.preload()')
    library = ('launchpad_py', 'grpc', 'concurrent')
    assert {m for m in in_node - preloaded if m.startswith(library)} == set()
