"""The Ray cluster as the launcher sees it: connecting, actor options, gang reservation.

Ray is imported here (and in the actor) only, on first use, so a missing ray fails
with the line that installs it instead of an ImportError from deep inside.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
from typing import Any

from launchpad_py import errors
from launchpad_py.launchers.ray.resources import RayOptions, RayResources

INSTALL_LINE = "pip install 'launchpad_py[ray]'"
_log = logging.getLogger(__name__)


def ray_module():
    """The ``ray`` package, or a LaunchError with the pip line that installs it."""
    try:
        import ray
    except ImportError as exc:
        raise errors.LaunchError(f"launch_type='ray' needs Ray, which is not installed here "
                                 f'({exc}); install it with: {INSTALL_LINE}') from exc
    return ray


def connect(options: RayOptions):
    """Joins the cluster ``options`` name as a driver (or keeps this process's connection).

    A process that already called ``ray.init`` keeps its connection: its actors, ours
    included, then share its job and end with it.
    """
    ray = ray_module()
    if not ray.is_initialized():
        address = _found(options.cluster_address())
        main = threading.current_thread() is threading.main_thread()
        sigterm = signal.getsignal(signal.SIGTERM) if main else None
        try:
            ray.init(address=address, namespace=options.namespace, log_to_driver=False,
                     logging_level=logging.WARNING)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise errors.LaunchError(f'cannot connect to the Ray cluster at {address!r}: {exc} '
                                     "(ray_options={'address': ...}, or RAY_ADDRESS)") from exc
        finally:
            if main:  # ray.init makes SIGTERM raise SystemExit; the launcher behaves as elsewhere.
                signal.signal(signal.SIGTERM, sigterm)
    return ray


def _found(address: str) -> str:
    """``'auto'`` as the ``host:port`` of the cluster Ray finds on this machine.

    Given ``'auto'``, Ray advertises this driver on the interface of the default route,
    which a cluster on a private network (the test hosts, a lab's subnet) may not reach:
    the driver's actors then die at once, "all references removed". Given the head's
    address, Ray picks the interface that routes to it. Anything else is kept as given.
    """
    if address != 'auto':
        return address
    try:
        from ray._private import services
        return services.get_ray_address_from_environment('auto', None) or address
    except Exception:  # A Ray without this helper: let ray.init look, as before.
        return address


def launcher_ip(ray, options: RayOptions) -> str:
    """Our address as the cluster's hosts reach it: the interface that routes to the head."""
    if options.launcher_address:
        return options.launcher_address
    head = (options.address or '').removeprefix('ray://')
    if not head or head in ('auto', 'local'):
        head = ray.get_runtime_context().gcs_address
    host = head.rpartition(':')[0] or head
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((socket.gethostbyname(host), 9))  # Sends nothing: only picks a route.
        return probe.getsockname()[0]


def actor_options(spec: RayResources, options: RayOptions, name: str) -> dict[str, Any]:
    """What ``NodeHost.options(...)`` gets for an actor of a group with ``spec``: the asks
    of all ``spec.nodes_per_actor`` nodes it holds."""
    runtime_env = {**(options.runtime_env or {}), **(spec.runtime_env or {})}
    nodes = spec.nodes_per_actor
    # Each node's output is a long poll: one thread each, and a few for starts and stops.
    chosen: dict[str, Any] = {'name': name, 'num_cpus': spec.num_cpus * nodes,
                              'num_gpus': spec.num_gpus * nodes, 'max_restarts': 0,
                              'max_concurrency': 3 + nodes}
    if spec.memory:
        chosen['memory'] = spec.memory * nodes
    if spec.resources:
        chosen['resources'] = {key: amount * nodes for key, amount in spec.resources.items()}
    if runtime_env:
        chosen['runtime_env'] = runtime_env
    if not isinstance(spec.scheduling, str):  # Node labels.
        chosen['label_selector'] = dict(spec.scheduling)
    elif spec.scheduling == 'SPREAD':
        chosen['scheduling_strategy'] = 'SPREAD'
    return chosen


def _fits(bundle: dict[str, float], node: dict) -> bool:
    have = node.get('Resources', {})
    return all(have.get(name, 0) >= amount for name, amount in bundle.items())


def why_pending(ray, table: dict, bundles: list[dict[str, float]]) -> str:
    """Ray's scheduling state of a pending placement group, and the bundles no host can hold."""
    state = (table.get('stats') or {}).get('scheduling_state', table.get('state', 'PENDING'))
    nodes = [node for node in ray.nodes() if node.get('Alive')]
    homeless = [bundle for bundle in bundles if not any(_fits(bundle, n) for n in nodes)]
    if homeless:
        return (f'{state}: no host of the cluster has {homeless[0]}'
                + (f' (nor room for {len(homeless) - 1} more such bundles)' if len(homeless) > 1
                   else '')
                + f'; the hosts have {[n.get("Resources", {}) for n in nodes]}')
    return f'{state}: the hosts are busy or too few for all {len(bundles)} bundles at once'


def reserve(ray, program_name: str, bundles: list[dict[str, float]], options: RayOptions):
    """One placement group for the whole program, ready; else a LaunchError saying why.

    Logs why it waits every few seconds, and gives up (removing the group) at
    ``options.gang_timeout``.
    """
    from ray.util.placement_group import (placement_group, placement_group_table,
                                          remove_placement_group)
    group = placement_group(bundles, strategy=options.gang_strategy,
                                name=f'launchpad-{program_name}')
    ready = group.ready()
    deadline = time.monotonic() + options.gang_timeout
    reason = 'PENDING'
    while True:
        left = deadline - time.monotonic()
        done, _ = ray.wait([ready], timeout=max(0.0, min(5.0, left)))
        if done:
            return group
        reason = why_pending(ray, placement_group_table(group), bundles)
        if time.monotonic() >= deadline:
            remove_placement_group(group)
            raise errors.LaunchError(
                f'the placement group of program {program_name!r} ({len(bundles)} bundles, '
                f'strategy {options.gang_strategy}) was not placed within '
                f"{options.gang_timeout:g} s (ray_options['gang_timeout']): {reason}; "
                'nothing was started')
        _log.warning('program %r waits for its placement group: %s', program_name, reason)
