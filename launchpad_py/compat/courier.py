"""The courier module as DeepMind Launchpad's code uses it (``import courier``).

    server = courier.Server(port=5000)
    server.Bind('add', lambda a, b: a + b)
    server.Start()
    courier.Client('localhost:5000', call_timeout=5).add(1, 2)

Built on ``launchpad_py.courier``; new code should use that module directly.
"""

from __future__ import annotations

import datetime
import threading
from typing import Callable

import portpicker

from launchpad_py import courier as _courier

list_methods = _courier.list_methods


class _BoundFunctions:
    """The object a Bind-style server serves: one attribute per bound name."""

    def __init__(self) -> None:
        self._functions: dict[str, Callable] = {}

    def __getattr__(self, name: str) -> Callable:
        try:
            return self.__dict__['_functions'][name]
        except KeyError:
            raise AttributeError(name) from None

    def __dir__(self) -> list[str]:
        return list(self._functions)


class Server:
    """A server whose methods are bound one by one, started with ``Start()``."""

    def __init__(self, name: str | None = None, port: int | None = None,
                 thread_pool_size: int = 16):
        del name  # Named servers were a Google-internal feature; ports are used here.
        self._port = port if port is not None else portpicker.pick_unused_port()
        self._thread_pool_size = thread_pool_size
        self._functions = _BoundFunctions()
        self._server: _courier.Server | None = None
        self._stopped = threading.Event()

    @property
    def port(self) -> int:
        return self._port

    @property
    def address(self) -> str:
        return f'localhost:{self._port}'

    @property
    def has_started(self) -> bool:
        return self._server is not None

    def Bind(self, method_name: str, py_func: Callable) -> None:  # noqa: N802 (original name)
        self._functions._functions[method_name] = py_func

    def Unbind(self, method_name: str) -> None:  # noqa: N802
        self._functions._functions.pop(method_name, None)

    def Start(self) -> None:  # noqa: N802
        if self._server is not None:
            raise ValueError('Server already started')
        self._server = _courier.Server(self._functions, self._port,
                                       thread_pool_size=self._thread_pool_size).start()

    def Stop(self) -> None:  # noqa: N802
        if self._server is None:
            raise ValueError('Server not started yet')
        self._server.stop()
        self._stopped.set()

    def Join(self) -> None:  # noqa: N802
        if self._server is None:
            raise ValueError('Server not started')
        self._stopped.wait()

    def SetIsHealthy(self, is_healthy: bool) -> None:  # noqa: N802
        """Accepted for compatibility; health is not reported separately here."""
        if self._server is None:
            raise ValueError('Cannot set health status; server not started.')


class Client(_courier.Client):
    """``Client(server_address, compress=False, call_timeout=None, wait_for_ready=True)``."""

    def __init__(self, server_address: str, compress: bool = False,
                 call_timeout: float | int | datetime.timedelta | None = None,
                 wait_for_ready: bool = True, chunk_tensors: bool = False, **options):
        del chunk_tensors  # Large payloads are chunked by the transport itself.
        super().__init__(str(server_address), compress, call_timeout, wait_for_ready, **options)


def __getattr__(name: str):
    # batched_handler and friends come from launchpad_py.courier as they exist there.
    return getattr(_courier, name)
