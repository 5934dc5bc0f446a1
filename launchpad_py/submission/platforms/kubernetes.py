"""Submitting to Kubernetes: the controller runs in the pod of a Job (``kubernetes_objects``).

    submit(record, secret, pickled)   # ServiceAccount, Role, RoleBinding, Secret, Job; returns
    state(record)                     # 'RUNNING', 'PENDING', or None once the Job is gone
    read(record, name)                # controller.log, endpoint.json, result.json: from the API
    follow(record)                    # the controller's log, live, pod after pod
    cancel(record)                    # delete the Job: SIGTERM to the controller, then the rest
    controller_pod(record)            # (pod, pod IP, endpoint port) of the running controller
    open_port(record, pod, port)      # a socket to the pod's port through pods/portforward

Nothing of the program is read from files here: the log is the controller
pod's log (``pods/log``), the result its container's exit code, and the
endpoint's address the pod's IP and the port the controller logs first. So
``logs``, ``status``, ``list`` and ``wait`` need only the API server; the
endpoint (``status``'s node table, the clean ``stop``, ``dashboard``) needs a
route to the pod's IP as well (docs/walk_away.md), except ``dashboard``, which
can go through the API's port forward (``dashboard_relay``). A result, once seen, is
kept in the program's record directory, so it outlives the Job's TTL.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import threading
import time
from typing import Iterator

from launchpad_py import errors
from launchpad_py.launchers.kubernetes.api import Cluster, load_client
from launchpad_py.submission import records
from launchpad_py.submission.platforms.kubernetes_objects import (SCRIPT, Objects, SubmitOptions,
                                                                  owner_of)

#: The controller's first line names its endpoint (``controller_main.run``).
_ENDPOINT = re.compile(r'controller \(pid \d+\) on (\S+):(\d+)')
_HEAD_BYTES = 64 * 1024


def options_of(record: dict) -> SubmitOptions:
    return SubmitOptions.from_mapping(record.get('kubernetes_options'))


@contextlib.contextmanager
def _cluster(record: dict):
    """The cluster of the submission; the API's errors (away, refusing) as LaunchError."""
    import urllib3
    options = options_of(record)
    cluster = Cluster(options.namespace, options.context)
    try:
        yield cluster
    except (OSError, urllib3.exceptions.HTTPError, _api_error()) as exc:
        raise errors.LaunchError(f'the Kubernetes API at {cluster.host} failed for program '
                                 f'{record["id"]}: {type(exc).__name__}: {exc}') from None
    finally:
        cluster.close()


def _api_error() -> type:
    return load_client().client.exceptions.ApiException


def _plain(response) -> dict:
    """An API answer read with ``_preload_content=False``, as plain JSON (as api.py reads)."""
    return json.loads(response.data)


def files_of(record: dict, secret: bytes | None, pickled: bytes | None) -> dict[str, bytes]:
    """What the controller pod finds mounted: record, secret, the script or program."""
    files = {records.RECORD: json.dumps(record, indent=1).encode(),
             records.SECRET: secret.hex().encode() if secret else b'(made when submitted)'}
    if pickled is not None:
        files[records.PROGRAM] = pickled
    else:
        with open(record['script'], 'rb') as source:
            files[SCRIPT] = source.read()
    return files


def render(record: dict, pickled: bytes | None) -> list[dict]:
    """The objects ``submit`` applies, for ``--dry_run``: the secret and the Job's uid are
    placeholders (both are made when submitting)."""
    owner = {'apiVersion': 'batch/v1', 'kind': 'Job', 'name': record['job'],
             'uid': '(the Job uid, once created)'}
    return Objects(record, options_of(record)).all(files_of(record, None, pickled), owner)


def submit(record: dict, secret: bytes, pickled: bytes | None) -> dict:
    """Creates the Job (suspended), what it owns, then lets it run; the record's fields."""
    objects = Objects(record, options_of(record))
    with _cluster(record) as cluster:
        job = cluster.create(objects.job())
        owner = owner_of(job)
        try:
            files = files_of(dict(record, owner=owner), secret, pickled)
            for manifest in [*objects.rights(owner), objects.secret(files, owner)]:
                cluster.create(manifest)
            cluster.batch.patch_namespaced_job(
                record['job'], cluster.namespace,
                [{'op': 'replace', 'path': '/spec/suspend', 'value': False}],
                _content_type='application/json-patch+json')
        except BaseException:
            cluster.delete_job(record['job'])
            raise
    return {'where': 'Kubernetes Job', 'job_uid': owner['uid']}


def _job(cluster: Cluster, record: dict) -> dict | None:
    try:
        return _plain(cluster.batch.read_namespaced_job(record['job'], cluster.namespace,
                                                        _preload_content=False))
    except _api_error() as exc:
        if exc.status == 404:
            return None
        raise


def _pods(cluster: Cluster, record: dict) -> list[dict]:
    """The controller's pods, oldest first (more than one after a controller restart)."""
    pods = _plain(cluster.core.list_namespaced_pod(
        cluster.namespace, label_selector=f'job-name={record["job"]}',
        _preload_content=False))['items']
    return sorted(pods, key=lambda p: (p['metadata'].get('creationTimestamp') or '',
                                       int(p['metadata'].get('resourceVersion') or 0)))


def _finished(job: dict) -> str | None:
    for condition in (job.get('status') or {}).get('conditions') or ():
        if condition['type'] in ('Complete', 'Failed') and condition['status'] == 'True':
            return condition['type']
    return None


def _exit_code(pod: dict) -> int | None:
    for status in (pod.get('status') or {}).get('containerStatuses') or ():
        terminated = (status.get('state') or {}).get('terminated')
        if terminated:
            return int(terminated['exitCode'])
    return None


def state(record: dict) -> str | None:
    with _cluster(record) as cluster:
        job = _job(cluster, record)
        if job is None or _finished(job):
            return None
        phases = [(p.get('status') or {}).get('phase') for p in _pods(cluster, record)]
        return 'RUNNING' if 'Running' in phases else 'PENDING'


def cancel(record: dict) -> None:
    """Deletes the Job: its pod gets SIGTERM (the controller's clean stop), the rest goes."""
    with _cluster(record) as cluster:
        cluster.delete_job(record['job'])


def _log(cluster: Cluster, pod: dict, head: bool = False) -> str:
    options = {'limit_bytes': _HEAD_BYTES} if head else {}
    try:
        return cluster.core.read_namespaced_pod_log(pod['metadata']['name'], cluster.namespace,
                                                    **options)
    except _api_error():  # Not started yet, or gone.
        return ''


def _result(cluster: Cluster, record: dict) -> dict | None:
    kept = os.path.join(record['dir'], records.RESULT)
    with contextlib.suppress(FileNotFoundError):
        return json.loads(records.read_private(kept))
    job = _job(cluster, record)
    if job is None or not _finished(job):
        return None
    pods = _pods(cluster, record)
    code = _exit_code(pods[-1]) if pods else None
    result = {'exit_code': 1 if code is None else code, 'ended': time.time(),
              'job': _finished(job)}
    records.write_private(kept, json.dumps(result), replace=True)
    return result


def _controller(cluster: Cluster, pods: list[dict]) -> tuple[str, str, int] | None:
    """The running controller pod's name, IP and endpoint port (None until it logged them)."""
    live = [p for p in pods if (p.get('status') or {}).get('phase') == 'Running']
    found = live and _ENDPOINT.search(_log(cluster, live[-1], head=True))
    if not found:
        return None
    host = (live[-1].get('status') or {}).get('podIP') or found.group(1)
    return live[-1]['metadata']['name'], host, int(found.group(2))


def controller_pod(record: dict) -> tuple[str, str, int] | None:
    """(pod name, pod IP, endpoint port) of the running controller; None while there is none."""
    with _cluster(record) as cluster:
        return _controller(cluster, _pods(cluster, record))


def open_port(record: dict, pod: str, port: int) -> socket.socket:
    """A socket to ``port`` of ``pod`` through the API server's ``pods/portforward`` (the
    websocket protocol ``kubectl port-forward`` speaks), so no route to the pod is needed."""
    from kubernetes.stream import portforward
    with _cluster(record) as cluster:
        forward = portforward(cluster.core.connect_get_namespaced_pod_portforward, pod,
                              cluster.namespace, ports=str(port))
        sock = forward.socket(port)
    sock.setblocking(True)
    return sock


def read(record: dict, name: str) -> str | None:
    """``name`` of the program's directory as the API shows it (None while there is none)."""
    with _cluster(record) as cluster:
        if name == records.RESULT:
            result = _result(cluster, record)
            return None if result is None else json.dumps(result)
        pods = _pods(cluster, record)
        if name == records.LOG:
            return ''.join(_log(cluster, pod) for pod in pods) or None
        if name == records.ENDPOINT:
            found = _controller(cluster, pods)
            return found and json.dumps({'host': found[1], 'port': found[2]})
    raise ValueError(f'no {name!r} for a Kubernetes submission')


def follow(record: dict) -> Iterator[str]:
    """The controller's log lines, live: each pod's in turn, until the Job has finished."""
    done: set[str] = set()
    pause = threading.Event()
    with _cluster(record) as cluster:
        while True:
            job = _job(cluster, record)
            pods = [p for p in _pods(cluster, record) if p['metadata']['uid'] not in done]
            if not pods and (job is None or _finished(job)):
                return
            for pod in pods:
                if (pod.get('status') or {}).get('phase') in (None, 'Pending'):
                    break  # Its log opens once it runs: look again.
                done.add(pod['metadata']['uid'])
                stream = cluster.follow_log(pod['metadata']['name'])
                try:
                    yield from iter(lambda: stream.readline().decode(errors='replace'), '')
                finally:
                    stream.close()
            pause.wait(0.5)  # Polling the API while a pod starts or the next one comes.
