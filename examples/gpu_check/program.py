"""A JAX learner on the GPU and CPU-only actors: the nodes and the program.

The learner's group gets ``gpus=[0]`` and no preallocation; the actors get
``gpus=[]`` and ``jax_platforms='cpu'``. Each node reports its pid and what JAX
sees, so ``__main__`` can match them against ``nvidia-smi``.
"""

from __future__ import annotations

import os

import launchpad_py as lp


def _report(step_result: float) -> dict:
    import jax
    device = jax.devices()[0]
    stats = device.memory_stats() if device.platform == 'gpu' else None
    node = lp.get_node_context()
    return {
        'node': f'{node.label}/{node.index}', 'pid': os.getpid(),
        'CUDA_VISIBLE_DEVICES': os.environ.get('CUDA_VISIBLE_DEVICES'),
        'platform': device.platform, 'devices': [str(d) for d in jax.devices()],
        'jax_bytes_in_use': (stats or {}).get('bytes_in_use'), 'step': step_result,
    }


class Learner:
    """Holds a matrix on its first JAX device and multiplies it."""

    def __init__(self, size: int = 4096):
        import jax.numpy as jnp
        self._weights = jnp.ones((size, size), dtype=jnp.float32)

    def step(self) -> float:
        return float((self._weights @ self._weights).sum())

    def report(self) -> dict:
        return _report(self.step())


class Actor:
    """Runs a small JAX computation on whatever it sees (the CPU)."""

    def step(self) -> float:
        import jax.numpy as jnp
        return float(jnp.arange(1000.0).sum())

    def report(self) -> dict:
        return _report(self.step())


def make_program(num_actors: int = 2) -> tuple[lp.Program, list]:
    program = lp.Program('gpu_check')
    handles = [program.add_node(lp.CourierNode(Learner), label='learner')]
    with program.group('actor'):
        handles += [program.add_node(lp.CourierNode(Actor)) for _ in range(num_actors)]
    return program, handles


RESOURCES = {
    'learner': lp.PythonProcess(gpus=[0], jax_preallocate=False),
    'actor': lp.PythonProcess(gpus=[], jax_platforms='cpu'),
}
