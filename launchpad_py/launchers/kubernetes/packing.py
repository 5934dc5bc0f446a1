"""Nodes packed N per pod (``lp.KubernetesResources(nodes_per_pod=N)``).

A pod per node costs the cluster a pod, and the launcher a create, a Secret
and a watch entry, per node. A packed group gets one pod per N nodes instead:
its container runs the pod agent (``node_side/pod_agent.py``), the host agent
of ssh and Slurm's ``steps='host'`` behind a connection it dials back, and the
launcher asks that agent to start each of the pod's nodes as a process, as it
asks a host's agent over ssh (``launchers/remote/host_agents.py``).

Each node keeps its identity, status and address (the pod's IP and a port of
its own). A node that fails restarts alone in the same pod (``lp.Restart``,
counted); a pod the cluster ends (deleted, evicted, preempted) ends all its
nodes, which come back in the pod's next run (``-r1``) without counting, under
the pod's reason. A node added to an elastic group goes to a new pod, filled
N at a time; a pod whose nodes have all left its group is deleted.

    packing = Packing(deployment, renderer, launcher_ip)
    placement = packing.place('actor', 7)
    ...
    packing.close(program_name)   # Ends every agent, then the listener.
"""

from __future__ import annotations

import concurrent.futures
import threading

from launchpad_py.launchers.kubernetes import pods
from launchpad_py.launchers.kubernetes.pod_sessions import AgentListener, PodSession
from launchpad_py.launchers.remote import launch as remote
from launchpad_py.launchers.remote.host_agents import AgentStarter, HostAgent
from launchpad_py.supervision.launch_kit import output


class PackedPod:
    """Pod ``number`` of a packed group: its nodes, its agent, and the agent's runs."""

    def __init__(self, packing: 'Packing', label: str, number: int, indices: list[int]):
        self.label, self.number, self.indices = label, number, list(indices)
        self.packing = packing
        self.agent = HostAgent([], self.name(0), open_session=self._open)
        self.session: PodSession | None = None
        self._incarnation = -1
        self.current: dict[int, PackedStarter] = {}  # index -> the starter of its run now
        self.closed = False

    def name(self, incarnation: int) -> str:
        return self.packing.names.packed_pod(self.label, self.number, incarnation)

    def shown_as(self) -> str:
        """The pod its nodes run in, or will run in next (``-r1`` after the pod was lost)."""
        session = self.session
        if session is not None and session.eof.is_set():
            return self.name(self._incarnation + 1)
        return self.name(max(self._incarnation, 0))

    def note(self, text: str) -> None:
        for starter in list(self.current.values()):
            starter.note(text)

    def _open(self) -> PodSession:
        """A run of the pod (the agent's first start, or one after the pod was lost)."""
        packing, deployment = self.packing, self.packing.deployment
        old, self._incarnation = self.session, self._incarnation + 1
        session = PodSession(self.name(self._incarnation), deployment.cluster,
                             lambda: deployment.finished, self.note)
        self.session = session
        deployment.follow(session)
        packing.listener.expect(session)
        try:
            deployment.creates.submit(self._create, session, self._incarnation, old)
        except RuntimeError:  # The program is over already.
            session.close()
        return session

    def _create(self, session: PodSession, incarnation: int, old: PodSession | None) -> None:
        deployment, packing = self.packing.deployment, self.packing
        if old is not None and old.created:  # The lost run's Secret (and pod, if left).
            deployment.cluster.delete_pod(old.pod_name)
            deployment.cluster.delete_secret(packing.names.secret_of(old.pod_name))
        boot = {'launcher': list(packing.listener.address), 'key': packing.listener.key.hex(),
                'pod': session.pod_name, 'secret': packing.secret}
        secret, pod = packing.render(self.label, self.number, self.indices, deployment.owner,
                                     boot, incarnation)
        try:
            deployment.cluster.create(secret)
            if deployment.finished:
                return
            deployment.cluster.create(pod)
            session.created = True
        except Exception as exc:  # Refused: its nodes fail, with the API server's reason.
            session.refused(str(exc))

    def release(self, starter: 'PackedStarter') -> None:
        """``starter``'s node left its elastic group (or a restart replaced it: nothing to do);
        the last to leave ends the agent and deletes the pod."""
        if self.current.get(starter.index) is not starter:
            return
        del self.current[starter.index]
        if self.current or self.packing.deployment.finished:
            return
        self.closed = True
        self.agent.close()
        session = self.session
        if session is not None and session.created:
            cluster = self.packing.deployment.cluster
            cluster.delete_pod(session.pod_name)
            cluster.delete_secret(self.packing.names.secret_of(session.pod_name))


class PackedStarter(AgentStarter):
    """One node of a packed pod: started, killed and restarted by the pod's agent."""

    #: Its port may be taken by another run in the pod, and a lost pod comes back at a new
    #: IP: clients find a restarted node through the launch's address book.
    keeps_addresses = False

    def __init__(self, packed: PackedPod, index: int):
        super().__init__(packed.agent)
        self.packed, self.index = packed, index
        self._sink: output.Sink | None = None
        self._session: PodSession | None = None
        self._stopping = False  # The stop reached the node: its pod's end is part of it.
        packed.current[index] = self

    @property
    def shown_as(self) -> str:
        return self.packed.shown_as()

    def start(self, boot: dict, sink: output.Sink) -> None:
        """Asks the pod's agent to start the node; the program secret stays out of the
        request (the pod has it from its Secret)."""
        self._sink = sink
        self.packed.packing.open_all(boot['secret'])
        super().start({k: v for k, v in boot.items() if k != 'secret'}, sink)
        self._session = self.packed.session

    def note(self, text: str) -> None:
        if self._sink is not None:
            self._sink.note(text)

    def again(self, host: str | None) -> 'PackedStarter | None':
        del host
        if self.packed.packing.deployment.finished or self.packed.closed:
            return None
        return PackedStarter(self.packed, self.index)

    def stop_requested(self) -> None:
        self._stopping = True

    def _lost_session(self) -> PodSession | None:
        """The pod session whose loss ended this node, unless the node was stopping then."""
        session = self._session
        return session if self._host_lost and not self._stopping else None

    def taken_away(self) -> str | None:
        session = self._lost_session()
        return session.taken if session is not None else None

    def lost_by(self) -> str | None:
        """The pod's loss (deleted, evicted, preempted, its node lost, its connection lost);
        None when the node failed alone, the pod's agent did by itself, or the pod ended
        after the node's stop had begun."""
        session = self._lost_session()
        return session.lost_by if session is not None else None

    def release(self) -> None:
        self.packed.release(self)


class Packing:
    """The packed pods of one launch, and the listener their agents dial."""

    def __init__(self, deployment: pods.Deployment, render, launcher_ip: str,
                 layout: dict[tuple[str, int], list[int]], nodes_per_pod: dict[str, int]):
        """``render(label, number, indices, owner, boot, incarnation) -> (secret, pod)``;
        ``layout``: the pods at launch, ``(label, number) -> indices``."""
        self.deployment, self.names, self.render = deployment, deployment.names, render
        self._launcher_ip, self._per_pod = launcher_ip, nodes_per_pod
        self.listener = AgentListener(launcher_ip)
        self._pods: dict[tuple[str, int], PackedPod] = {}  # (label, index) -> its pod
        self._numbers: dict[str, int] = {}
        self._growing: dict[str, PackedPod] = {}  # label -> the pod that takes added nodes
        self.secret: str | None = None  # The program's, from the first node's bootstrap.
        self._lock = threading.Lock()
        for (label, number), indices in layout.items():
            pod = PackedPod(self, label, number, indices)
            self._numbers[label] = max(self._numbers.get(label, 0), number + 1)
            for index in indices:
                self._pods[label, index] = pod

    def open_all(self, secret: str) -> None:
        """At the first node's start (the program secret is known then): every pod of the
        launch is queued for creation at once, not each as its first node's turn comes (the
        launcher starts a thousand nodes one after the other, while the first pods' nodes
        already dial in)."""
        with self._lock:
            if self.secret is not None:
                return
            self.secret = secret
            pods = {id(pod): pod for pod in self._pods.values()}.values()
        for pod in pods:
            pod.agent.open()

    def packs(self, label: str) -> bool:
        return label in self._per_pod

    def place(self, label: str, index: int) -> remote.Placement:
        """Node ``label/index`` in its pod: at launch, or added to its elastic group (then
        in a new pod, which the next additions fill up to ``nodes_per_pod``)."""
        pod = self._pods.get((label, index))
        if pod is None:
            pod = self._growing.get(label)
            if pod is None or pod.closed or len(pod.indices) >= self._per_pod[label]:
                number = self._numbers.get(label, 0)
                self._numbers[label] = number + 1
                pod = self._growing[label] = PackedPod(self, label, number, [])
            pod.indices.append(index)
            self._pods[label, index] = pod
        return remote.Placement([], pod.name(0), self._launcher_ip,
                                starter=PackedStarter(pod, index))

    def close(self, program_over: str | None = None) -> None:
        """Ends every pod's agent (at once: each waits for its pod to say goodbye), then the
        listener; idempotent."""
        agents = {id(pod): pod.agent for pod in self._pods.values()}.values()
        if agents:
            with concurrent.futures.ThreadPoolExecutor(min(32, len(agents))) as pool:
                list(pool.map(lambda agent: agent.close(program_over=program_over), agents))
        self.listener.close()
