"""A fake Kubernetes API server over real HTTP, for the official client the launcher uses.

No Kubernetes API server can run on these machines, so the launcher's calls
go to this one. It implements exactly those calls (and the listings the
tests make): create/list/watch/get/delete Pods with their logs, create/list
Secrets, create/list/patch (JSON Patch)/delete Jobs; and, for submitted
programs, create/get ServiceAccounts, Roles and RoleBindings (stored only:
the fake enforces no RBAC). ``kubelet.py`` plays
the scheduler, the kubelet and the Job and TTL controllers.

    with FakeCluster(tmp_path, nodes=[FakeNode('h1', netns='lp-h1')]) as cluster:
        os.environ['KUBECONFIG'] = cluster.kubeconfig
"""

from __future__ import annotations

import http.server
import json
import re
import threading
import time
import urllib.parse

from fake_kube.store import KINDS, ApiError, Store

_PATH = re.compile(r'^/(?:api/v1|apis/batch/v1|apis/rbac.authorization.k8s.io/v1)/namespaces/'
                   r'(?P<ns>[^/]+)/(?P<resource>pods|secrets|jobs|serviceaccounts|roles|'
                   r'rolebindings)(?:/(?P<name>[^/]+)(?P<log>/log)?)?$')


def _resources(group_version: str, names: list[tuple[str, str, bool]]) -> dict:
    return {'kind': 'APIResourceList', 'apiVersion': 'v1', 'groupVersion': group_version,
            'resources': [{'name': name, 'singularName': '', 'namespaced': True, 'kind': kind,
                           'verbs': ['create', 'delete', 'get', 'list', 'patch', 'watch']
                           if full else ['get']} for name, kind, full in names]}


#: Legacy discovery, which kubectl reads before `kubectl logs POD`.
_DISCOVERY = {
    '/api': {'kind': 'APIVersions', 'versions': ['v1'], 'serverAddressByClientCIDRs': []},
    '/apis': {'kind': 'APIGroupList', 'apiVersion': 'v1', 'groups': [{
        'name': 'batch', 'versions': [{'groupVersion': 'batch/v1', 'version': 'v1'}],
        'preferredVersion': {'groupVersion': 'batch/v1', 'version': 'v1'}}, {
        'name': 'rbac.authorization.k8s.io',
        'versions': [{'groupVersion': 'rbac.authorization.k8s.io/v1', 'version': 'v1'}],
        'preferredVersion': {'groupVersion': 'rbac.authorization.k8s.io/v1', 'version': 'v1'}}]},
    '/api/v1': _resources('v1', [('pods', 'Pod', True), ('pods/log', 'Pod', False),
                                 ('secrets', 'Secret', True),
                                 ('serviceaccounts', 'ServiceAccount', True)]),
    '/apis/batch/v1': _resources('batch/v1', [('jobs', 'Job', True)]),
    '/apis/rbac.authorization.k8s.io/v1': _resources('rbac.authorization.k8s.io/v1', [
        ('roles', 'Role', True), ('rolebindings', 'RoleBinding', True)]),
}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    server: 'ApiServer'

    def log_message(self, *args) -> None:  # Quiet: requests are counted instead.
        pass

    def _route(self):
        url = urllib.parse.urlsplit(self.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        match = _PATH.match(url.path)
        if match is None:
            raise ApiError(404, 'NotFound', f'the fake API server has no {url.path}')
        self.server.calls.append((self.command, match['resource'], bool(match['name']),
                                  bool(match['log']), query.get('watch') == 'true'))
        return match['ns'], match['resource'], match['name'], match['log'], query

    def _body(self):
        length = int(self.headers.get('Content-Length') or 0)
        return json.loads(self.rfile.read(length)) if length else None

    def _send(self, code: int, obj) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self, method) -> None:
        try:
            method(*self._route())
        except ApiError as error:
            self._send(error.code, error.status())

    def do_POST(self) -> None:
        def post(ns, resource, name, log, query):
            self._send(201, self.server.store.create(resource, ns, self._body()))
        self._handle(post)

    def do_GET(self) -> None:
        discovery = _DISCOVERY.get(urllib.parse.urlsplit(self.path).path)
        if discovery is not None:
            self._send(200, discovery)
        else:
            self._handle(self._get)

    def _get(self, ns, resource, name, log, query) -> None:
        store = self.server.store
        if log:
            self._stream_log(ns, name, query.get('follow') == 'true')
        elif name:
            self._send(200, store.get(resource, ns, name))
        elif query.get('watch') == 'true':
            self._watch(ns, resource, query)
        else:
            items, version = store.list(resource, ns, query.get('labelSelector'))
            kind = KINDS[resource][0]
            self._send(200, {'kind': f'{kind}List', 'apiVersion': 'v1', 'items': items,
                             'metadata': {'resourceVersion': version}})

    def do_PATCH(self) -> None:
        def patch(ns, resource, name, log, query):
            if self.headers.get('Content-Type') != 'application/json-patch+json':
                raise ApiError(415, 'UnsupportedMediaType', 'the fake takes JSON Patch only')
            operations = self._body()
            self._send(200, self.server.store.update(resource, ns, name,
                                                     lambda obj: _json_patch(obj, operations)))
        self._handle(patch)

    def do_DELETE(self) -> None:
        def delete(ns, resource, name, log, query):
            self._body()  # DeleteOptions: propagation is always Background here.
            self._send(200, self.server.store.delete(resource, ns, name))
        self._handle(delete)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f'{len(data):x}\r\n'.encode() + data + b'\r\n')
        self.wfile.flush()

    def _start_stream(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header('Content-Type', content_type)
        self.send_header('Transfer-Encoding', 'chunked')
        self.end_headers()

    def _watch(self, ns: str, resource: str, query: dict) -> None:
        version = int(query.get('resourceVersion') or 0)
        deadline = time.monotonic() + float(query.get('timeoutSeconds') or 30)
        self._start_stream('application/json')
        try:
            while time.monotonic() < deadline and not self.server.closing.is_set():
                events = self.server.store.events_after(
                    version, resource, ns, query.get('labelSelector'),
                    min(0.5, max(0.0, deadline - time.monotonic())))
                for version, kind, obj in events:
                    self._chunk(json.dumps({'type': kind, 'object': obj}).encode() + b'\n')
            self._chunk(b'')
        except OSError:  # The client went away.
            self.close_connection = True

    def _stream_log(self, ns: str, name: str, follow: bool) -> None:
        source = self.server.kubelet.log_source(ns, name)  # Raises 400 while it waits to start.
        self._start_stream('text/plain')
        try:
            for data in source.read(follow, self.server.closing):
                self._chunk(data)
            self._chunk(b'')
        except OSError:
            self.close_connection = True


def _json_patch(obj: dict, operations: list) -> None:
    for operation in operations:
        if operation.get('op') not in ('replace', 'add'):
            raise ApiError(422, 'Invalid', f'the fake applies replace/add only: {operation}')
        *parents, last = operation['path'].strip('/').split('/')
        target = obj
        for part in parents:
            target = target[part]
        target[last] = operation['value']


class ApiServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, store: Store, kubelet, host: str = '127.0.0.1'):
        super().__init__((host, 0), Handler)
        self.store, self.kubelet = store, kubelet
        self.closing = threading.Event()
        #: (method, resource, named, log, watch) of every request, for tests to check.
        self.calls: list[tuple] = []
