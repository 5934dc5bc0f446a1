"""GPU placement on a real GPU: runs examples/gpu_check, which needs an NVIDIA GPU and JAX."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from conftest import REPO


@pytest.mark.skipif(shutil.which('nvidia-smi') is None,
                    reason='no NVIDIA GPU here (nvidia-smi not found); CI has none')
def test_only_the_gpu_learner_holds_gpu_memory():
    """A JAX learner given gpus=[0] holds GPU memory; actors given gpus=[] hold none."""
    pytest.importorskip('jax', reason="JAX is not installed; pip install 'jax[cuda12]'")
    result = subprocess.run([sys.executable, '-m', 'examples.gpu_check'], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'only the learner holds GPU memory' in result.stdout
