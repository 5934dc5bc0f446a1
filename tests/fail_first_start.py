"""Imported before a node's code (``LAUNCHPAD_PY_PRELOAD``): the first start of the node fails.

The first import creates ``$LP_TEST_FAIL_FILE`` and raises, before the node
could report ready; later starts find the file and go on.
"""

import os

_path = os.environ['LP_TEST_FAIL_FILE']
if not os.path.exists(_path):
    open(_path, 'w').close()
    raise RuntimeError('this node fails its first start')
