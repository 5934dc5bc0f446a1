"""Which GPUs a node process may see, and the settings that keep GPUs shared.

Two defaults follow from these helpers (docs/gpus.md explains them):

- a process that can see no GPU gets ``JAX_PLATFORMS=cpu``, so JAX starts on
  the CPU quietly instead of printing a CUDA initialisation traceback;
- processes that may see the same GPU get ``XLA_PYTHON_CLIENT_PREALLOCATE=false``
  and ``TF_FORCE_GPU_ALLOW_GROWTH=true``, so the first JAX or TensorFlow process
  does not claim most of the GPU's memory before the others start.

A setting the user chose (in a group's resources or in the launcher's own
environment) always wins over these.
"""

from __future__ import annotations

import glob
from typing import Mapping

ALL = None  # visible_gpus() of a process that sees every GPU of the machine
HIDDEN_PRESETS = {'JAX_PLATFORMS': 'cpu'}
SHARING_PRESETS = {'XLA_PYTHON_CLIENT_PREALLOCATE': 'false', 'TF_FORCE_GPU_ALLOW_GROWTH': 'true'}
# Any of these means the user chose how JAX allocates; sharing then adds nothing for JAX.
_JAX_ALLOCATION = ('XLA_PYTHON_CLIENT_PREALLOCATE', 'XLA_PYTHON_CLIENT_MEM_FRACTION',
                   'XLA_PYTHON_CLIENT_ALLOCATOR')


def visible_gpus(cuda_visible_devices: str | None) -> frozenset[str] | None:
    """The GPUs a ``CUDA_VISIBLE_DEVICES`` value shows: ``ALL`` when unset.

        visible_gpus('0,1') == {'0', '1'};  visible_gpus('') == set()
    CUDA stops reading the list at the first negative index, so ``'-1'`` shows none.
    """
    if cuda_visible_devices is None:
        return ALL
    shown = []
    for item in (part.strip() for part in cuda_visible_devices.split(',')):
        if not item or item.startswith('-'):
            break
        shown.append(item)
    return frozenset(shown)


def may_share(a: frozenset[str] | None, b: frozenset[str] | None) -> bool:
    """Whether two processes with these visible GPUs may use one GPU together.

    Indices and UUIDs cannot be matched without the driver, so a set holding a
    UUID is taken to meet any other non-empty set.
    """
    if a == frozenset() or b == frozenset():
        return False
    if a is ALL or b is ALL:
        return True
    if not all(g.isdigit() for g in a | b):
        return True
    return bool(a & b)


def hidden_environment(chosen: Mapping[str, str]) -> dict[str, str]:
    """What a process that sees no GPU gets, less what ``chosen`` already sets."""
    return {k: v for k, v in HIDDEN_PRESETS.items() if k not in chosen}


def sharing_environment(chosen: Mapping[str, str]) -> dict[str, str]:
    """What processes sharing a GPU get, less what ``chosen`` (or a related JAX setting) sets."""
    presets = dict(SHARING_PRESETS)
    if any(k in chosen for k in _JAX_ALLOCATION):
        del presets['XLA_PYTHON_CLIENT_PREALLOCATE']
    return {k: v for k, v in presets.items() if k not in chosen}


def machine_has_gpus() -> bool:
    """Whether an NVIDIA GPU device node exists here (only decides what gets logged)."""
    return bool(glob.glob('/dev/nvidia[0-9]*'))
