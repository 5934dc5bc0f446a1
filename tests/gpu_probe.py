"""A node that starts JAX and tells which backends JAX tried to start (for test_gpu_defaults)."""

from __future__ import annotations

import logging


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


class JaxProbe:
    def backends_tried(self) -> tuple[str, list[str]]:
        """(platform of JAX's first device, the log lines of every backend JAX tried)."""
        records = _Records()
        logger = logging.getLogger('jax._src.xla_bridge')
        logger.addHandler(records)
        logger.setLevel(logging.DEBUG)
        import jax
        platform = jax.devices()[0].platform
        logger.removeHandler(records)
        return platform, [m for m in records.messages if 'backend' in m.lower() and 'cache' not in m]
