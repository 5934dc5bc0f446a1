"""The web dashboard of a running program, served by the launching process on loopback.

Off by default; ``lp.launch(p, dashboard=True)`` or ``--lp_dashboard`` starts it
and prints its address with a token, which every request must carry (``?token=``
or ``Authorization: Bearer``)::

    launchpad_py: dashboard of program 'agent': http://127.0.0.1:8765/?token=…

Routes: ``/`` the page (graph coloured by state, per-node metrics with plots,
recent output, the failure's traceback); ``/api/status`` the same data as JSON,
which the page polls; ``/api/group?label=…&offset=…&limit=…`` a page of a big
group's members; ``/metrics`` Prometheus text. A group of more than
``group_summary.COLLAPSE_OVER`` nodes shows as counts by state, its members a
page at a time on demand (see ``group_summary``). One sampler thread asks the
nodes once per interval, however many browsers watch. Node processes need
nothing for this: they answer over their control channel as for ``lp status``.

The dashboard outlives the program, so a failure stays readable, until
``close()`` (also on leaving ``with lp.launch(...)``) or the process ends.

It lives in the launcher, so a stranger on loopback must not be able to
weigh on it: at most ``MAX_CONNECTIONS`` are served at once (more are
closed unanswered), each gets ``CONNECTION_SECONDS`` for its request, and a
connection that breaks is one debug line, not a traceback.
"""

from __future__ import annotations

import hmac
import http.server
import json
import logging
import secrets
import sys
import threading
import urllib.parse

from launchpad_py.observability import dashboard_page, group_summary, prometheus

_log = logging.getLogger(__name__)
TAIL_LINES = 20
MEMBERS_PAGE_MAX = 200  # Members of a group per /api/group answer, at most.
MAX_CONNECTIONS = 16
CONNECTION_SECONDS = 5.0


class Dashboard:
    """Serves one controller's dashboard until ``close``."""

    def __init__(self, controller, graph, port: int = 0, interval: float = 1.0):
        self.token = secrets.token_urlsafe(18)
        self._controller = controller
        self._graph = graph
        self._interval = interval
        self._closed = threading.Event()
        self._report_lock = threading.Lock()
        self._nodes: list = []
        self.refresh()
        self._server = _Server(('127.0.0.1', port), _Handler, self)
        self.port = self._server.server_address[1]
        self._threads = [
            threading.Thread(target=self._server.serve_forever, kwargs={'poll_interval': 0.2},
                             name=f'lp-dashboard-{controller.name}', daemon=True),
            threading.Thread(target=self._sample_loop, name=f'lp-dashboard-sampler-{controller.name}',
                             daemon=True)]
        for thread in self._threads:
            thread.start()

    @property
    def url(self) -> str:
        return f'http://127.0.0.1:{self.port}/?token={self.token}'

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self._server.shutdown()
        self._server.server_close()
        for thread in self._threads:
            thread.join(5)

    # -- data -------------------------------------------------------------------------

    def refresh(self) -> dict:
        """Asks the nodes now (the sampler does so every interval); the new report."""
        controller = self._controller
        nodes = controller.statistics(timeout=self._interval)
        big = group_summary.collapsed(nodes, group_summary.COLLAPSE_OVER)
        report = {'program': controller.name, 'launch_type': controller.launch_type,
                  'running': controller.is_running,
                  'nodes': [self._node_data(node) for node in nodes if node.label not in big],
                  'groups': group_summary.summaries(nodes, big)}
        with self._report_lock:
            self._nodes, self._report = nodes, report
        return report

    def _node_data(self, node) -> dict:
        data = node.to_dict()
        data['history'] = self._controller.history(node.name)
        data['output'] = self._controller.output_tail(node.name).splitlines()[-TAIL_LINES:]
        return data

    def group_page(self, label: str, offset: int, limit: int) -> dict:
        """Members ``offset`` to ``offset + limit`` of group ``label``, as the report's nodes."""
        with self._report_lock:
            nodes = self._nodes
        size, page = group_summary.members(nodes, label, max(0, offset),
                                           max(1, min(limit, MEMBERS_PAGE_MAX)))
        return {'label': label, 'size': size, 'offset': offset,
                'members': [self._node_data(node) for node in page]}

    def _sample_loop(self) -> None:
        while not self._closed.wait(self._interval):
            try:
                self.refresh()
            except Exception:  # A bad sample must not end the dashboard.
                _log.exception('dashboard of program %r: sampling failed', self._controller.name)

    def report(self) -> dict:
        with self._report_lock:
            return self._report

    def metrics_text(self) -> str:
        with self._report_lock:
            nodes = self._nodes
        return prometheus.exposition(self._controller.name, nodes)

    def page(self) -> str:
        return dashboard_page.render(self._graph, self.report(), self.token)

    def allows(self, query: dict, headers) -> bool:
        given = (query.get('token') or [''])[0]
        bearer = headers.get('Authorization', '')
        if bearer.startswith('Bearer '):
            given = bearer[len('Bearer '):]
        return hmac.compare_digest(given.encode(), self.token.encode())


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    # Connections past the bound are accepted and closed at once, not left to kernel retries.
    request_queue_size = 128

    def __init__(self, address, handler, dashboard: Dashboard):
        self.dashboard = dashboard
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(address, handler)

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # Busy: no thread for it.
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request, client_address) -> None:
        _log.debug('dashboard: a connection from %s ended: %s', client_address[0],
                   sys.exc_info()[1])


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    timeout = CONNECTION_SECONDS  # For the request line, headers and the answer's writes.

    def do_GET(self) -> None:  # noqa: N802 (the http.server name)
        url = urllib.parse.urlsplit(self.path)
        dashboard = self.server.dashboard
        query = urllib.parse.parse_qs(url.query)
        if not dashboard.allows(query, self.headers):
            self._send(403, 'text/plain', 'launchpad_py dashboard: add ?token=… as printed by '
                                          'the launcher\n')
            return
        if url.path == '/':
            self._send(200, 'text/html; charset=utf-8', dashboard.page())
        elif url.path == '/api/status':
            self._send(200, 'application/json', json.dumps(dashboard.report()))
        elif url.path == '/api/group':
            self._send_group(dashboard, query)
        elif url.path == '/metrics':
            self._send(200, 'text/plain; version=0.0.4; charset=utf-8', dashboard.metrics_text())
        else:
            self._send(404, 'text/plain', f'no page {url.path}\n')

    def _send_group(self, dashboard: Dashboard, query: dict) -> None:
        label = (query.get('label') or [''])[0]
        try:
            offset, limit = (int((query.get(k) or [default])[0])
                             for k, default in (('offset', '0'), ('limit', '50')))
        except ValueError:
            self._send(400, 'text/plain', 'offset and limit must be integers\n')
            return
        self._send(200, 'application/json', json.dumps(dashboard.group_page(label, offset, limit)))

    def _send(self, code: int, kind: str, body: str) -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header('Content-Type', kind)
        self.send_header('Content-Length', str(len(data)))
        self.send_header('Cache-Control', 'no-store')
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format, *args) -> None:  # Requests are not the program's news.
        _log.debug('dashboard: ' + format, *args)


def open_dashboard(controller, graph, port: int = 0) -> Dashboard:
    """Starts the dashboard and prints where it is (with its token) in the launcher's log."""
    board = Dashboard(controller, graph, port)
    message = f'launchpad_py: dashboard of program {controller.name!r}: {board.url}'
    print(message, flush=True)  # Printed, not logged: under app.run a log line would repeat it.
    _log.debug(message)
    return board
