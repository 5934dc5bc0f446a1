"""What a ``ProgramController`` offers to look at a running program, for every launcher.

Kept apart from the supervision code in ``controller.py``: statistics (see
``statistics.py``), the status handle file read by ``python -m
launchpad_py.cli.status`` (see ``status_endpoint.py``) and the web dashboard
(see ``dashboard.py``). The controller supplies ``name``, ``launch_type``,
``is_running`` and its workers.

    for node in controller.statistics():
        print(node.name, node.state.value, node.calls, node.calls_per_s)
"""

from __future__ import annotations

from launchpad_py.observability import dashboard as dashboard_module
from launchpad_py.observability import statistics as statistics_module
from launchpad_py.observability import status_endpoint


class Observability:
    """Mixed into ``ProgramController``."""

    _workers: list

    def _init_observability(self) -> None:
        self._monitor = statistics_module.Monitor()
        self._endpoint: status_endpoint.StatusEndpoint | None = None
        #: The web dashboard, when launched with dashboard=True (see open_dashboard).
        self.dashboard: dashboard_module.Dashboard | None = None

    def statistics(self, timeout: float = 2.0) -> list[statistics_module.NodeStatistics]:
        """Live per-node state and counters: calls, latency, bytes, RSS, CPU.

        Asks every running node at once; one that does not answer within
        ``timeout`` keeps the counters it last reported (so do ended nodes).
        """
        return self._monitor.sample(self._workers, timeout)

    def history(self, node: str) -> list[dict]:
        """Recent samples of ``node`` ('label/index'): t, calls_per_s, cpu_percent, rss_bytes."""
        return self._monitor.history(node)

    def output_tail(self, node: str) -> str:
        """The last lines ``node`` ('label/index') printed."""
        for worker in self._workers:
            if worker.name == node:
                return worker.output_tail()
        raise KeyError(f'program {self.name!r} has no node {node!r}')

    @property
    def status_handle(self) -> str | None:
        """The handle file ``python -m launchpad_py.cli.status`` reads, while the program runs."""
        return self._endpoint.handle_path if self._endpoint is not None else None

    def open_dashboard(self, graph, port: int = 0) -> dashboard_module.Dashboard:
        """Serves the web dashboard on loopback; prints its address and token.

        ``graph`` is ``launchpad_py.program.graph.structure(program)``. It stays up
        after the program ends, until ``dashboard.close()`` or leaving ``with``.
        """
        if self.dashboard is None:
            self.dashboard = dashboard_module.open_dashboard(self, graph, port)
        return self.dashboard

    def _open_status_endpoint(self) -> None:
        self._endpoint = status_endpoint.open_for(self)

    def _close_status_endpoint(self) -> None:
        if self._endpoint is not None:
            self._endpoint.close()

    def _close_dashboard(self) -> None:
        if self.dashboard is not None:
            self.dashboard.close()
