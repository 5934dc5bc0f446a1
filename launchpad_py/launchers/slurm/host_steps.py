"""One job step per host instead of one per node (``slurm_options={'steps': 'host'}``).

Each ``srun`` step costs the launcher a process and slurmctld a step record,
so a program of a thousand nodes spends most of its launch starting steps.
With steps per host, one step on each host of the allocation runs the host
agent (``node_side/host_agent.py``), which forks that host's nodes; the step
holds all of the job's CPUs and memory there (``--overlap``: the nodes share
them). A restart asks the same agent; ``scancel`` or the time limit ends the
step, so the agent's nodes end too and say why (``taken_away``).

Only for jobs of one component whose groups ask for no GPUs: a GPU needs a
step of its own for Slurm to bind it (``steps='node'``, as before).

    placements, agents = place_by_host(program, job, specs, launcher_ip, command)
"""

from __future__ import annotations

import re

from launchpad_py import errors
from launchpad_py.launchers.remote import launch as remote
from launchpad_py.launchers.remote.host_agents import AgentStarter, HostAgent
from launchpad_py.launchers.slurm.job import Job, run
from launchpad_py.launchers.slurm.resources import SlurmResources
from launchpad_py.program import Program


class AgentStep(AgentStarter):
    """A node started by its host's agent step; when Slurm ends the job, says so.
    ``peers``: the agents of the job's hosts that can run this node (same environment)."""

    def __init__(self, agent: HostAgent, job: Job, peers: list[HostAgent] | None = None):
        super().__init__(agent)
        self._job, self._peers = job, peers if peers is not None else [agent]
        self._failed: bool | None = None  # Whether Slurm reported the host failed, once asked.
        self.shown_as = agent.host

    def again(self, host: str | None) -> 'AgentStep':
        """The same host's agent (the same address), or, when Slurm reports the host failed
        (the job goes on without it: ``--no-kill``), the agent of another host of the job,
        where the node binds its old ports again and reports its new address."""
        agent = self.agent
        if self.lost_by() == 'node_failure':
            hosts = job_hosts(self._job)
            agent = next((peer for peer in self._peers if peer is not agent
                          and peer.host in hosts and not node_failed(peer.host)), agent)
        return AgentStep(agent, self._job, self._peers)

    def host_gone(self) -> bool:
        return self.lost_by() == 'node_failure'

    def taken_away(self) -> str | None:
        return self._job.ended_by()

    def lost_by(self) -> str | None:
        """The agent's step ended though the launcher did not end it, in a job still running:
        'node_failure' where Slurm reports the host down or failing, or took it out of the
        job, else 'host_lost'."""
        lost = super().lost_by()
        if lost is not None and self._failed is None:  # Asked once: the answer must not
            # change once the host is back (a failed host leaves the job: ``--no-kill``).
            self._failed = host_failed(self._job, self.agent.host)
        return 'node_failure' if lost is not None and self._failed else lost


_FAILED_NODE_STATES = ('DOWN', 'FAIL', 'NOT_RESPONDING', 'POWERED_DOWN')


def node_failed(host: str) -> bool:
    """Whether Slurm reports ``host`` down or failing (``scontrol show node``)."""
    try:
        shown = run(['scontrol', '-o', 'show', 'node', host])
    except errors.LaunchError:
        return False
    state = re.search(r'\bState=(\S+)', shown)
    return bool(state) and any(s in state.group(1) for s in _FAILED_NODE_STATES)


def host_failed(job: Job, host: str) -> bool:
    """Whether Slurm reports ``host`` down or failing, or took it out of ``job`` (which
    ``--no-kill`` keeps running without it)."""
    hosts = job_hosts(job)
    return node_failed(host) or bool(hosts) and host not in hosts


def job_hosts(job: Job) -> set[str]:
    """The hosts ``job`` holds now (a host that failed has left it); empty if Slurm cannot
    say (the job is over)."""
    try:
        shown = run(['scontrol', 'show', 'job', job.job_id])  # A record per component.
        lists = [nodes for nodes in re.findall(r'\bNodeList=(\S+)', shown) if nodes != '(null)']
        return set(run(['scontrol', 'show', 'hostnames', ','.join(lists)]).split()) if lists \
            else set()
    except errors.LaunchError:
        return set()


def _count_cpus(cpu_ids: str) -> int:
    """``'0-3,8'`` -> 5."""
    total = 0
    for part in cpu_ids.split(','):
        low, _, high = part.partition('-')
        total += int(high or low) - int(low) + 1
    return total


def cpus_by_host(job: Job) -> dict[str, int]:
    """The CPUs the job holds on each of its hosts (``scontrol show job -d``)."""
    cpus: dict[str, int] = {}
    shown = run(['scontrol', '-d', 'show', 'job', job.job_id])
    for hosts, cpu_ids in re.findall(r'\bNodes=(\S+) CPU_IDs=(\S+)', shown):
        for host in run(['scontrol', 'show', 'hostnames', hosts]).split():
            cpus[host] = cpus.get(host, 0) + _count_cpus(cpu_ids)
    return cpus


def place_by_host(program: Program, job: Job, specs: dict[str, SlurmResources],
                  launcher_ip: str, command) -> tuple[dict, list[HostAgent]]:
    """Every node on a host of the job, in proportion to the job's CPUs there; the agents.

    ``command(spec)``: what a host's step runs for groups of ``spec`` (their
    environment differs, so each environment gets an agent of its own per host).
    """
    cpus = cpus_by_host(job)
    used = dict.fromkeys(cpus, 0)
    agents: dict[tuple, HostAgent] = {}
    peers: dict[tuple, list[HostAgent]] = {}  # Agents by environment, across hosts.
    placements = {}
    for label, nodes in program.groups.items():
        spec = specs[label]
        env_key = tuple(sorted((spec.env or {}).items()))
        for node in nodes:
            host = min(cpus, key=lambda h: ((used[h] + spec.cpus) / cpus[h], h))
            used[host] += spec.cpus
            if (host, env_key) not in agents:
                argv = [*job.srun(None), '--nodes=1', '--ntasks=1', f'--nodelist={host}',
                        f'--cpus-per-task={cpus[host]}', '--mem=0', '--overlap', '--gres=none',
                        f'--job-name=lp-agent-{host}', *command(spec)]
                agents[host, env_key] = HostAgent(argv, host)
                peers.setdefault(env_key, []).append(agents[host, env_key])
            placements[label, node.index] = remote.Placement(
                agents[host, env_key].argv, host, launcher_ip,
                starter=AgentStep(agents[host, env_key], job, peers[env_key]))
    return placements, list(agents.values())
