"""``launch_type='kubernetes'``: every node is a Pod.

    lp.launch(p, launch_type='kubernetes', resources={
        'learner': lp.KubernetesResources(image='registry/team/agent:1.2', cpu='8',
                                          memory='32Gi', gpus=1),
        'actor': lp.KubernetesResources(image='registry/team/agent:1.2', cpu='1', memory='2Gi'),
    }, kubernetes_options={'namespace': 'research'})

This module only renders each node's manifests and creates them; the rest
is ``launchers/remote/``'s, as for ssh: each pod runs ``remote_node_main``, reads its
bootstrap from its mounted Secret, dials back to the launcher, reports its pod
address (late binding), and gets its executable over that authenticated
channel, so the executables are never stored in the cluster. The launcher
must therefore be reachable from the pods (docs/launchers.md).

A group with ``nodes_per_pod=N`` runs N nodes per pod instead (``packing.py``).

``--lp_k8s_manifests_dir=DIR`` (or ``kubernetes_options={'manifests_dir': DIR}``)
writes the manifests as YAML into DIR and applies nothing.
"""

from __future__ import annotations

import os

from launchpad_py import errors, flags
from launchpad_py.launchers.kubernetes import manifests
from launchpad_py.launchers.kubernetes.packing import Packing
from launchpad_py.launchers.remote import launch as remote
from launchpad_py.supervision.controller import ProgramController
from launchpad_py.launchers.kubernetes.api import Cluster, load_client
from launchpad_py.launchers.kubernetes.pods import Deployment
from launchpad_py.launchers.kubernetes.resources import (KubernetesOptions, KubernetesResources,
                                                         resources_of_groups)
from launchpad_py.launchers.options import LaunchOptions
from launchpad_py.program import Program


def _node_keys(program: Program) -> list[tuple[str, int]]:
    """(label, index) of every executable, as ``remote.launch`` will place them."""
    return [(e.label, e.index) for node in program.get_all_nodes() for e in node.to_executables()]


class Renderer:
    """Renders the manifests of one launch: the root Job, and each node's Secret and Pod."""

    def __init__(self, program: Program, resources: dict[str, KubernetesResources],
                 options: KubernetesOptions, grace: float):
        self.keys = _node_keys(program)
        if not self.keys:
            raise errors.ProgramError(f'program {program.name!r} has no nodes; add some with '
                                      'add_node')
        self.names = manifests.Names(program.name, self.keys)
        self._resources, self._options, self._grace = resources, options, grace
        self._hide_gpus = any(spec.gpus for spec in resources.values())
        #: Packed groups' pods at launch, ``(label, number) -> indices``, N in index order.
        self.layout: dict[tuple[str, int], list[int]] = {}
        for label, index in sorted(self.keys):
            per_pod = resources[label].nodes_per_pod
            if per_pod > 1:
                number = sum(1 for key in self.layout if key[0] == label)
                last = self.layout.get((label, number - 1))
                if last is None or len(last) >= per_pod:
                    self.layout[label, number] = last = []
                last.append(index)
        self.nodes_per_pod = {label: spec.nodes_per_pod for label, spec in resources.items()
                              if spec.nodes_per_pod > 1}

    def root(self) -> dict:
        return manifests.root_job(self.names, self._options,
                                  self._resources[self.keys[0][0]].image)

    def node(self, label: str, index: int, owner: dict | None, boot: dict | None,
             incarnation: int = 0):
        """(Secret, Pod) of node ``label/index``'s run ``incarnation`` (0: the first; a
        restart is a new pod); ``boot`` None renders a placeholder secret."""
        return (manifests.boot_secret(self.names, self._options, label, index, owner, boot,
                                      incarnation),
                manifests.pod(self.names, self._options, label, index, self._resources[label],
                              owner, self._grace, self._hide_gpus, incarnation))

    def packed(self, label: str, number: int, indices: list[int], owner: dict | None,
               boot: dict | None, incarnation: int = 0):
        """(Secret, Pod) of packed pod ``number`` of group ``label``, for nodes ``indices``."""
        return (manifests.packed_secret(self.names, self._options, label, number, owner, boot,
                                        incarnation),
                manifests.packed_pod(self.names, self._options, label, number, indices,
                                     self._resources[label], owner, self._grace,
                                     self._hide_gpus, incarnation))

    def all(self) -> list[dict]:
        documents = [self.root()]
        for label, index in self.keys:
            if label not in self.nodes_per_pod:
                documents += self.node(label, index, None, None)
        for (label, number), indices in self.layout.items():
            documents += self.packed(label, number, indices, None, None)
        return documents


def write_manifests(renderer: Renderer, directory: str) -> list[str]:
    """Writes each manifest of the launch to ``directory`` as ``<kind>-<name>.yaml``."""
    load_client()  # Only to fail with the pip line: PyYAML comes with the kubernetes client.
    import yaml
    os.makedirs(directory, exist_ok=True)
    paths = []
    for document in renderer.all():
        path = os.path.join(directory,
                            f"{document['kind'].lower()}-{document['metadata']['name']}.yaml")
        with open(path, 'w') as out:
            yaml.safe_dump(document, out, sort_keys=False)
        paths.append(path)
    return paths


def _dry_run(program: Program, renderer: Renderer, directory: str, grace: float):
    paths = write_manifests(renderer, directory)
    print(f'launchpad_py: wrote {len(paths)} manifests of {program.name!r} to {directory}; '
          'nothing was applied', flush=True)
    return ProgramController(program.name, 'kubernetes', grace, keep_process_alive=False).start([])


def kubernetes_options(options: LaunchOptions) -> KubernetesOptions:
    """``kubernetes_options=`` of lp.launch, with ``--lp_k8s_manifests_dir`` as its default."""
    given = dict(options.launcher_options or {})
    flag_dir = flags.value_or_default(flags.K8S_MANIFESTS_DIR)
    if flag_dir and 'manifests_dir' not in given:
        given['manifests_dir'] = flag_dir
    return KubernetesOptions.from_mapping(given)


def launch_kubernetes(program: Program, options: LaunchOptions) -> ProgramController:
    if options.serialize_py_nodes is False:
        raise errors.ProgramError('kubernetes always serializes nodes to ship them to their pods; '
                                  'leave serialize_py_nodes unset')
    k8s = kubernetes_options(options)
    resources = resources_of_groups(list(program.groups), options.local_resources or {},
                                    flags.value_or_default(flags.K8S_IMAGE))
    renderer = Renderer(program, resources, k8s, options.grace)
    if k8s.manifests_dir:
        return _dry_run(program, renderer, k8s.manifests_dir, options.grace)
    cluster = Cluster(k8s.namespace, k8s.context)
    launcher_ip = k8s.launcher_address or cluster.route_address()
    deployment = Deployment(cluster, renderer.names, renderer.node, k8s.lease_seconds,
                            k8s.create_concurrency)

    packing = Packing(deployment, renderer.packed, launcher_ip, renderer.layout,
                      renderer.nodes_per_pod) if renderer.nodes_per_pod else None

    def place(label: str, index: int) -> remote.Placement:
        """A node's pod (or its place in a packed pod): at launch, or added to its elastic
        group later."""
        if packing is not None and packing.packs(label):
            return packing.place(label, index)
        return remote.Placement([], renderer.names.pod(label, index), launcher_ip,
                                starter=deployment.starter(label, index))

    def finish() -> None:
        if packing is not None:  # Its agents first: each ends its pod's nodes, then itself.
            packing.close(program_over=program.name)
        deployment.finish()

    try:
        deployment.create_root(renderer.root())
        placements = {key: place(*key) for key in renderer.keys}
        return remote.launch(program, options, 'kubernetes', placements, place_new=place,
                             on_finish=finish)
    except BaseException:
        finish()
        raise
