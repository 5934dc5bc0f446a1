"""The fork server's warm interpreter holds every module the public API loads.

``import launchpad_py`` resolves its public names lazily, so a fork server that only
imported the package would leave each forked node to import the node types, the courier
server and the rest after the fork: a 300-node ``local_mp`` launch took 11.3 s instead of
about 4 s (bench/scale_partial38.json).
"""

import subprocess
import sys

from conftest import REPO

_LIST = "import sys; print(' '.join(sorted(m for m in sys.modules if m.startswith('launchpad_py'))))"


def _modules(code: str) -> set[str]:
    done = subprocess.run([sys.executable, '-c', code + '\n' + _LIST], capture_output=True,
                          text=True, timeout=120, cwd=REPO, check=True)
    return set(done.stdout.split())


def test_preload_holds_every_module_of_the_public_api():
    public = _modules('import launchpad_py as lp\nfor n in lp.__all__: getattr(lp, n)')
    preloaded = _modules('from launchpad_py.node_side import fork_server\nfork_server.preload()')
    assert 'launchpad_py.nodes.courier_node' in public
    assert public - preloaded == set()
