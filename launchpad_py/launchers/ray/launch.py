"""``launch_type='ray'``: every node runs in a Ray actor on a cluster the user already has.

    lp.launch(p, launch_type='ray', resources={'learner': lp.RayResources(num_gpus=1)},
              ray_options={'address': 'auto'})

Ray decides where each node runs and keeps its process alive for as long as the
program (the actors belong to this driver: they end with it); everything after the
start (dial back, address table, logs, stop, restarts) is ``launchers/remote/``'s,
so nodes call each other over courier, not through Ray. With ``gang=True`` the whole
program is one placement group: placed all at once, or the launch fails saying why.
"""

from __future__ import annotations

import itertools
import secrets
import threading

from launchpad_py import errors
from launchpad_py.launchers.options import LaunchOptions
from launchpad_py.launchers.ray import checkpoint_cleanup, cluster
from launchpad_py.launchers.ray.node_host import HOST_ENV, NodeHost
from launchpad_py.launchers.ray.resources import RayOptions, RayResources, resources_of_groups
from launchpad_py.launchers.ray.shared_actor import SharedActor
from launchpad_py.launchers.ray.starter import RayStarter
from launchpad_py.launchers.remote import launch as remote
from launchpad_py.node_side import devices
from launchpad_py.program import Program
from launchpad_py.supervision.controller import ProgramController


def _gpu_presets(spec: RayResources) -> dict[str, str]:
    """docs/gpus.md's defaults, as under local_mp: a node that may share a GPU (no whole GPU of
    its own: Ray then shows it every GPU of its host, or a fraction of one) does not preallocate
    GPU memory; one told to see none runs JAX on the CPU. The group's own ``env`` wins."""
    own = dict(spec.env or {})
    if own.get('CUDA_VISIBLE_DEVICES') == '':
        return devices.hidden_environment(own)
    if spec.num_gpus < 1:
        return devices.sharing_environment(own)
    return {}


def _check_options(options: LaunchOptions) -> None:
    if options.serialize_py_nodes is False:
        raise errors.ProgramError('ray always serializes nodes to ship them to their actors; '
                                  'leave serialize_py_nodes unset')


class _Actors:
    """The actors nodes run in: node i of a group in actor i // ``nodes_per_actor`` of it,
    each with its options from the group's resources and a unique name."""

    def __init__(self, ray, program: Program, specs: dict[str, RayResources], ray_options,
                 group=None, bundles: dict[tuple[str, int], int] | None = None):
        self._ray, self._specs, self._options = ray, specs, ray_options
        self._host_class = ray.remote(NodeHost)
        self._prefix = f'launchpad:{program.name}:{secrets.token_hex(4)}'
        self._group, self._bundles = group, bundles or {}
        self._serial = itertools.count(1)  # Restarts come from several threads.
        self._shares: dict[tuple[str, int], SharedActor] = {}
        self._lock = threading.Lock()

    def place(self, label: str, index: int) -> tuple[SharedActor, int]:
        """The actor share of node ``label/index``, and its slot in that actor."""
        slots = self._specs[label].nodes_per_actor
        which = (label, index // slots)
        with self._lock:
            if which not in self._shares:
                self._shares[which] = SharedActor(self._maker(*which), slots)
            return self._shares[which], index % slots

    def _maker(self, label: str, number: int):
        def make(pin: str | None):
            # A new actor gets a new name (a killed one's may linger a moment).
            name = f'{self._prefix}:{label}/{number}:{next(self._serial)}'
            chosen = cluster.actor_options(self._specs[label], self._options, name)
            strategies = self._ray.util.scheduling_strategies
            bundle = self._bundles.get((label, number))
            if bundle is not None:  # Its bundle holds its resources, and stays on one host.
                chosen.pop('label_selector', None)
                chosen['scheduling_strategy'] = strategies.PlacementGroupSchedulingStrategy(
                    self._group, placement_group_bundle_index=bundle)
            elif pin is not None:
                chosen.pop('label_selector', None)
                chosen['scheduling_strategy'] = strategies.NodeAffinitySchedulingStrategy(
                    pin, soft=False)
            return self._host_class.options(**chosen).remote()
        return make


def launch_ray(program: Program, options: LaunchOptions) -> ProgramController:
    _check_options(options)
    ray_options = RayOptions.from_dict(options.launcher_options)
    specs = resources_of_groups(program.groups, dict(options.local_resources or {}))
    nodes = [(label, node.index) for label in program.groups for node in program.groups[label]]
    if not nodes:
        raise errors.ProgramError(f'program {program.name!r} has no nodes to launch')
    ray = cluster.connect(ray_options)
    launcher_ip = cluster.launcher_ip(ray, ray_options)
    # The actors of the nodes there are now, in order: (group, its actor number).
    shares = list(dict.fromkeys((label, index // specs[label].nodes_per_actor)
                                for label, index in nodes))
    group = None
    if ray_options.gang:
        group = cluster.reserve(ray, program.name, [
            specs[label].bundle(specs[label].nodes_per_actor) or {'CPU': 0.01}
            for label, _ in shares], ray_options)
    actors = _Actors(ray, program, specs, ray_options, group,
                     {share: i for i, share in enumerate(shares)} if group is not None else None)
    env = remote.node_environment()
    visits = checkpoint_cleanup.Visits()

    def place(label: str, index: int) -> remote.Placement:
        spec = specs[label]
        spec_env = {**env, **_gpu_presets(spec), **(spec.env or {})}
        share, slot = actors.place(label, index)
        return remote.Placement(argv=[], host='ray', launcher_ip=launcher_ip, host_env=HOST_ENV,
                                starter=RayStarter(share, f'{label}/{index}', slot, spec_env,
                                                   asks=spec.bundle(spec.nodes_per_actor),
                                                   visits=visits))

    def finish() -> None:
        checkpoint_cleanup.remove_on_nodes(ray, visits, program.name)
        release()

    def release() -> None:
        if group is not None:
            try:
                ray.util.remove_placement_group(group)
            except Exception:  # Ray already gone (its driver shut down): nothing is held.
                pass

    try:
        return remote.launch(program, options, 'ray', {node: place(*node) for node in nodes},
                             place_new=place, on_finish=finish)
    except BaseException:
        release()
        raise
