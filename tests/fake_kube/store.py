"""The object store of the fake Kubernetes API server: create, patch, delete, list, watch.

It keeps what a real API server would for the launcher's calls: names and
labels checked with the API server's rules, ``resourceVersion`` on every
change, ``uid``, ``stringData`` folded into ``data``, and the garbage
collector's cascade (an object whose owners are all gone is deleted).
"""

from __future__ import annotations

import base64
import copy
import datetime
import re
import threading
import uuid

_DNS_LABEL = re.compile(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')
_DNS_SUBDOMAIN = re.compile(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')
_LABEL_NAME = re.compile(r'^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$')
_LABEL_VALUE = re.compile(r'^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$')
#: Resource (URL segment) -> kind and whether names must be DNS labels (pods, jobs) or subdomains.
KINDS = {'pods': ('Pod', True), 'secrets': ('Secret', False), 'jobs': ('Job', True),
         'serviceaccounts': ('ServiceAccount', False), 'roles': ('Role', False),
         'rolebindings': ('RoleBinding', False)}


class ApiError(Exception):
    """An error status the server answers with (a Kubernetes ``Status`` object)."""

    def __init__(self, code: int, reason: str, message: str):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def status(self) -> dict:
        return {'kind': 'Status', 'apiVersion': 'v1', 'status': 'Failure', 'code': self.code,
                'reason': self.reason, 'message': self.message}


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')


def _check_label_key(key: str) -> bool:
    prefix, _, name = key.rpartition('/')
    return (len(name) <= 63 and bool(_LABEL_NAME.match(name))
            and (not prefix or (len(prefix) <= 253 and bool(_DNS_SUBDOMAIN.match(prefix)))))


def validate(resource: str, namespace: str, obj: dict) -> None:
    """The API server's checks of metadata (names, namespace, labels) that the launcher meets."""
    kind, label_name = KINDS[resource]
    metadata = obj.get('metadata') or {}
    name = metadata.get('name', '')
    if obj.get('kind') != kind:
        raise ApiError(400, 'BadRequest', f'expected kind {kind}, got {obj.get("kind")!r}')
    limit, pattern = (63, _DNS_LABEL) if label_name else (253, _DNS_SUBDOMAIN)
    if len(name) > limit or not pattern.match(name):
        raise ApiError(422, 'Invalid', f'{kind} "{name}" is invalid: metadata.name: Invalid value')
    if metadata.get('namespace', namespace) != namespace:
        raise ApiError(400, 'BadRequest', 'the namespace of the object does not match the URL')
    for key, value in (metadata.get('labels') or {}).items():
        if not _check_label_key(key):
            raise ApiError(422, 'Invalid', f'{kind} "{name}" is invalid: metadata.labels: '
                                           f'Invalid value: "{key}": not a qualified name')
        if len(value) > 63 or not _LABEL_VALUE.match(value):
            raise ApiError(422, 'Invalid', f'{kind} "{name}" is invalid: metadata.labels: '
                                           f'Invalid value: "{value}"')


def matches(obj: dict, selector: str | None) -> bool:
    """Equality-based label selectors (``a=b,c=d``), as the launcher uses them."""
    labels = obj['metadata'].get('labels') or {}
    for term in filter(None, (selector or '').split(',')):
        key, _, value = term.partition('=')
        if labels.get(key) != value:
            return False
    return True


class Store:
    """Objects by (resource, namespace, name), a change log for watches, and the GC."""

    def __init__(self, namespaces=('default',)):
        self.namespaces = set(namespaces)
        self._objects: dict[tuple[str, str, str], dict] = {}
        self._log: list[tuple[int, str, str, str, dict]] = []  # (version, resource, ns, type, obj)
        self._version = 1
        self.changed = threading.Condition()
        #: Called (outside the lock) with each pod that is deleted, so the kubelet ends it.
        self.on_pod_deleted = lambda pod: None

    def _record(self, resource: str, namespace: str, kind: str, obj: dict) -> dict:
        self._version += 1
        obj['metadata']['resourceVersion'] = str(self._version)
        self._log.append((self._version, resource, namespace, kind, copy.deepcopy(obj)))
        self.changed.notify_all()
        return copy.deepcopy(obj)

    def create(self, resource: str, namespace: str, obj: dict) -> dict:
        if namespace not in self.namespaces:
            raise ApiError(404, 'NotFound', f'namespaces "{namespace}" not found')
        validate(resource, namespace, obj)
        obj = copy.deepcopy(obj)
        metadata = obj['metadata']
        metadata.update(namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=now())
        if 'stringData' in obj:  # As the real server does: stringData is write-only.
            data = obj.setdefault('data', {})
            for key, value in obj.pop('stringData').items():
                data[key] = base64.b64encode(value.encode()).decode()
        with self.changed:
            key = (resource, namespace, metadata['name'])
            if key in self._objects:
                raise ApiError(409, 'AlreadyExists',
                               f'{resource} "{metadata["name"]}" already exists')
            obj.setdefault('status', {})
            self._objects[key] = obj
            return self._record(resource, namespace, 'ADDED', obj)

    def get(self, resource: str, namespace: str, name: str) -> dict:
        with self.changed:
            obj = self._objects.get((resource, namespace, name))
            if obj is None:
                raise ApiError(404, 'NotFound', f'{resource} "{name}" not found')
            return copy.deepcopy(obj)

    def update(self, resource: str, namespace: str, name: str, change) -> dict:
        """Applies ``change(obj)`` in place under the lock; records a MODIFIED event."""
        with self.changed:
            obj = self._objects.get((resource, namespace, name))
            if obj is None:
                raise ApiError(404, 'NotFound', f'{resource} "{name}" not found')
            change(obj)
            return self._record(resource, namespace, 'MODIFIED', obj)

    def delete(self, resource: str, namespace: str, name: str) -> dict:
        """Deletes the object, then (as the garbage collector would) everything it owned."""
        deleted = []
        with self.changed:
            obj = self._objects.pop((resource, namespace, name), None)
            if obj is None:
                raise ApiError(404, 'NotFound', f'{resource} "{name}" not found')
            deleted.append((resource, self._record(resource, namespace, 'DELETED', obj)))
            deleted += self._collect_garbage()
        for kind, gone in deleted:
            if kind == 'pods':
                self.on_pod_deleted(gone)
        return deleted[0][1]

    def _collect_garbage(self) -> list[tuple[str, dict]]:
        collected = []
        while True:
            uids = {o['metadata']['uid'] for o in self._objects.values()}
            orphans = [key for key, o in self._objects.items()
                       if o['metadata'].get('ownerReferences')
                       and not any(r['uid'] in uids for r in o['metadata']['ownerReferences'])]
            if not orphans:
                return collected
            for key in orphans:
                obj = self._objects.pop(key)
                collected.append((key[0], self._record(key[0], key[1], 'DELETED', obj)))

    def list(self, resource: str, namespace: str | None, selector: str | None = None):
        with self.changed:
            items = [copy.deepcopy(o) for (r, ns, _), o in self._objects.items()
                     if r == resource and namespace in (None, ns) and matches(o, selector)]
            return items, str(self._version)

    def wait_for_change(self, version: int, timeout: float) -> int:
        """The store's version once a change has passed ``version``, or when ``timeout``
        ends first (the kubelet's loop: it acts on changes at once, on deadlines in time)."""
        with self.changed:
            self.changed.wait_for(lambda: self._version > version, timeout)
            return self._version

    def events_after(self, version: int, resource: str, namespace: str, selector: str | None,
                     timeout: float) -> list[tuple[int, str, dict]]:
        """Changes after ``version`` that match; waits up to ``timeout`` for the first."""
        with self.changed:
            def found():
                return [(v, kind, obj) for v, r, ns, kind, obj in self._log
                        if v > version and r == resource and ns == namespace
                        and matches(obj, selector)]
            events = found()
            if not events:
                self.changed.wait(timeout)
                events = found()
            return events
