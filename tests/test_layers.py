"""The layer rules of docs/architecture.md, as the import-linter contracts in pyproject.toml."""

import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_import_contracts_hold():
    """Every contract is kept: folders import only the layers below them, backends are
    independent, transports know no client or server, and no import cycle exists
    (type-only imports included)."""
    lint = shutil.which('lint-imports', path=os.path.dirname(sys.executable))
    if lint is None:
        pytest.fail('lint-imports not found beside this Python: pip install -e ".[dev]"')
    result = subprocess.run([lint, '--no-cache'], cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'Contracts: 8 kept, 0 broken.' in result.stdout, result.stdout


def test_architecture_map_is_current():
    """docs/architecture.md's folder table matches the imports (scripts/architecture.py)."""
    result = subprocess.run([sys.executable, os.path.join(REPO, 'scripts', 'architecture.py'),
                             '--check'], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
