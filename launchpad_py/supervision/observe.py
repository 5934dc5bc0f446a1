"""The controller's part for looking at a running program, for every launcher.

Kept apart from the supervision code in ``controller.py``: statistics (see
``statistics.py``), the status handle file read by ``python -m
launchpad_py.cli.status`` (see ``status_endpoint.py``) and the web dashboard
(see ``dashboard.py``). It reads the controller's workers and never changes
them; the endpoint and the dashboard are handed the controller itself, whose
public ``name``, ``launch_type``, ``is_running`` and ``statistics`` they show.

    for node in controller.statistics():
        print(node.name, node.state.value, node.calls, node.calls_per_s)
"""

from __future__ import annotations

from launchpad_py.observability import dashboard as dashboard_module
from launchpad_py.observability import statistics as statistics_module
from launchpad_py.observability import status_endpoint
from launchpad_py.supervision.worker import Worker


class Observability:
    """Statistics, output tails, the status endpoint and the dashboard of one program."""

    def __init__(self, name: str, workers: list[Worker]):
        self._name = name
        self._workers = workers  # The controller's list: nodes come and go in it.
        self._monitor = statistics_module.Monitor()
        self._endpoint: status_endpoint.StatusEndpoint | None = None
        #: The web dashboard, when launched with dashboard=True (see open_dashboard).
        self.dashboard: dashboard_module.Dashboard | None = None

    def statistics(self, timeout: float) -> list[statistics_module.NodeStatistics]:
        return self._monitor.sample(self._workers, timeout)

    def history(self, node: str) -> list[dict]:
        return self._monitor.history(node)

    def output_tail(self, node: str) -> str:
        for worker in self._workers:
            if worker.name == node:
                return worker.output_tail()
        raise KeyError(f'program {self._name!r} has no node {node!r}')

    @property
    def status_handle(self) -> str | None:
        return self._endpoint.handle_path if self._endpoint is not None else None

    def open_dashboard(self, controller, graph, port: int) -> dashboard_module.Dashboard:
        if self.dashboard is None:
            self.dashboard = dashboard_module.open_dashboard(controller, graph, port)
        return self.dashboard

    def open_status_endpoint(self, controller) -> None:
        self._endpoint = status_endpoint.open_for(controller)

    def close_status_endpoint(self) -> None:
        if self._endpoint is not None:
            self._endpoint.close()

    def close_dashboard(self) -> None:
        if self.dashboard is not None:
            self.dashboard.close()
