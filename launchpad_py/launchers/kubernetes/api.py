"""The few Kubernetes API calls the launcher makes, through the official client (an extra).

    cluster = Cluster(namespace='research')
    created = cluster.create(manifest)          # the object as the API server returned it
    cluster.watch_pods('launchpad-py/program=x-1a2b3c', on_event, stopped)

Exactly these calls: create a Job, Secret and Pod (and, submitting a
program, its controller's ServiceAccount, Role and RoleBinding); patch the Job's
``activeDeadlineSeconds``; delete the Job (the rest goes with it), a Pod or a
Secret (a restarted or removed node's);
list and watch Pods by label; follow a Pod's log. ``docs/launchers.md``
lists the RBAC rules they need.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import urllib.parse
from typing import Callable

from launchpad_py import errors

_log = logging.getLogger(__name__)
INSTALL_LINE = "pip install 'launchpad_py[kubernetes]'"
#: A watch request ends after this long and is made again: a stop never waits longer.
WATCH_S = 5


def load_client():
    """The ``kubernetes`` package, or an ImportError that gives the pip line."""
    try:
        import kubernetes
    except ImportError as exc:
        raise ImportError(f"launch_type='kubernetes' needs the official Kubernetes Python "
                          f"client, which is not installed: {INSTALL_LINE}") from exc
    return kubernetes


class _Lines:
    """``readline``/``close`` over a streamed response (a followed log), for output sinks."""

    def __init__(self, response):
        self._response = response
        self._chunks = response.stream(amt=None, decode_content=False)
        self._buffer = b''

    def readline(self) -> bytes:
        while b'\n' not in self._buffer:
            try:
                chunk = next(self._chunks)
            except Exception:  # Ended (StopIteration), cut, or shut down by close().
                line, self._buffer = self._buffer, b''
                return line
            self._buffer += chunk if isinstance(chunk, bytes) else chunk.encode()
        line, _, self._buffer = self._buffer.partition(b'\n')
        return line + b'\n'

    def close(self) -> None:
        _shutdown(self._response)


def _shutdown(response) -> None:
    """Ends a streamed response now, also when another thread is blocked reading it."""
    try:
        if hasattr(response, 'shutdown'):
            response.shutdown()
        response.release_conn()
    except Exception:  # Already closed.
        pass


def _raw(response):
    return getattr(response, 'response', response)


class Cluster:
    """One namespace of the cluster that the kubeconfig (or the pod's service account) names."""

    def __init__(self, namespace: str, context: str | None = None):
        kubernetes = load_client()
        self.namespace = namespace
        self._exceptions = kubernetes.client.exceptions.ApiException
        try:
            if os.environ.get('KUBERNETES_SERVICE_HOST'):
                kubernetes.config.load_incluster_config()
            else:
                # KUBECONFIG as it is now: the client reads it only once, on import.
                kubernetes.config.load_kube_config(config_file=os.environ.get('KUBECONFIG'),
                                                   context=context)
        except Exception as exc:
            raise errors.LaunchError(
                f'cannot reach a Kubernetes cluster: {type(exc).__name__}: {exc}. Set KUBECONFIG '
                'or ~/.kube/config (kubectl must work), or run the launcher in a pod') from exc
        self._api = kubernetes.client.ApiClient()
        self._streams: set[_Lines] = set()  # Open watches and logs, ended by close().
        self._lock = threading.Lock()
        self.host = self._api.configuration.host
        self.core = kubernetes.client.CoreV1Api(self._api)
        self.batch = kubernetes.client.BatchV1Api(self._api)
        self.rbac = kubernetes.client.RbacAuthorizationV1Api(self._api)

    def close(self) -> None:
        """Ends every open watch and log stream, also where a thread is blocked reading it."""
        with self._lock:
            streams, self._streams = list(self._streams), set()
        for stream in streams:
            stream.close()
        self._api.close()

    def _opened(self, response) -> _Lines:
        lines = _Lines(response)
        with self._lock:
            self._streams.add(lines)
        return lines

    def route_address(self) -> str:
        """This machine's address on the route to the API server (pods usually reach it too)."""
        url = urllib.parse.urlsplit(self.host)
        host = socket.getaddrinfo(url.hostname, url.port or 443, socket.AF_INET)[0][4][0]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as route:
            route.connect((host, 9))  # Picks a route; sends nothing.
            return route.getsockname()[0]

    def create(self, manifest: dict) -> dict:
        """Creates ``manifest`` (a Job, Secret or Pod); the object as the server returned it."""
        create = {'Job': self.batch.create_namespaced_job, 'Secret': self.core.create_namespaced_secret,
                  'Pod': self.core.create_namespaced_pod,
                  # A submitted program's controller: its service account and its rights.
                  'ServiceAccount': self.core.create_namespaced_service_account,
                  'Role': self.rbac.create_namespaced_role,
                  'RoleBinding': self.rbac.create_namespaced_role_binding}[manifest['kind']]
        try:
            created = create(self.namespace, manifest)
        except self._exceptions as exc:
            raise errors.LaunchError(
                f"the Kubernetes API refused {manifest['kind']} {manifest['metadata']['name']!r} "
                f'in namespace {self.namespace!r}: {exc.status} {exc.reason}: '
                f'{_message(exc)}') from exc
        return self._api.sanitize_for_serialization(created)

    def extend_deadline(self, job: str, seconds: int) -> None:
        patch = [{'op': 'replace', 'path': '/spec/activeDeadlineSeconds', 'value': seconds}]
        self.batch.patch_namespaced_job(job, self.namespace, patch,
                                        _content_type='application/json-patch+json')

    def delete_job(self, job: str) -> None:
        """Deletes the Job; the garbage collector then deletes what it owns."""
        self._quietly(self.batch.delete_namespaced_job, job, propagation_policy='Background')

    def delete_pod(self, pod: str) -> None:
        self._quietly(self.core.delete_namespaced_pod, pod, grace_period_seconds=0)

    def delete_secret(self, secret: str) -> None:
        self._quietly(self.core.delete_namespaced_secret, secret)

    def _quietly(self, delete: Callable, name: str, **options) -> None:
        try:
            delete(name, self.namespace, **options)
        except self._exceptions as exc:
            if exc.status != 404:  # Already gone is what we wanted.
                _log.warning('cannot delete %s in %s: %s %s', name, self.namespace, exc.status,
                             exc.reason)

    def follow_log(self, pod: str) -> _Lines:
        response = self.core.read_namespaced_pod_log(pod, self.namespace, follow=True,
                                                     _preload_content=False)
        return self._opened(_raw(response))

    def watch_pods(self, selector: str, on_event: Callable[[str, dict], None],
                   stopped: threading.Event) -> None:
        """Calls ``on_event(type, pod)`` for the pods ``selector`` matches until ``stopped``."""
        version = None
        while not stopped.is_set():
            try:
                if version is None:
                    version = self._list_pods(selector, on_event)
                version = self._watch_once(selector, version, on_event, stopped)
            except Exception as exc:  # The API server away for a moment: list again.
                if not stopped.wait(1):
                    _log.debug('watching pods again after %s: %s', type(exc).__name__, exc)
                version = None

    def _list_pods(self, selector: str, on_event) -> str:
        response = _raw(self.core.list_namespaced_pod(self.namespace, label_selector=selector,
                                                      _preload_content=False))
        listing = json.loads(response.data)
        for pod in listing['items']:
            on_event('ADDED', pod)
        return listing['metadata']['resourceVersion']

    def _watch_once(self, selector: str, version: str, on_event, stopped) -> str | None:
        response = _raw(self.core.list_namespaced_pod(
            self.namespace, label_selector=selector, watch=True, resource_version=version,
            timeout_seconds=WATCH_S, _preload_content=False, _request_timeout=(10, WATCH_S + 10)))
        lines = self._opened(response)
        try:
            while not stopped.is_set():
                line = lines.readline()
                if not line:
                    return version
                event = json.loads(line)
                if event['type'] == 'ERROR':  # e.g. 410 Gone: our version is too old.
                    return None
                version = event['object']['metadata'].get('resourceVersion', version)
                on_event(event['type'], event['object'])
        finally:
            lines.close()
            with self._lock:
                self._streams.discard(lines)
        return version


def _message(exc) -> str:
    try:
        return json.loads(exc.body)['message']
    except (TypeError, ValueError, KeyError):
        return str(exc.body)
