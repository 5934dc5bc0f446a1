"""``launch_type='ssh'``: every node is a process on a host reached over ssh.

    lp.launch(p, launch_type='ssh', resources={'learner': lp.SshHost('h1', gpus=[0]),
                                               'actor': [lp.SshHost('h2'), lp.SshHost('h3')]})

This module only decides where each node goes and builds the ssh command of
each host's agent; starting, the address table, logs, stop and cleanup are
``launchers/remote/``'s. One ssh session per host (not per node) runs the
agent (``node_side/host_agent.py``), which forks that host's nodes; the
session's stdin carries their bootstraps (with the program secret) and its
stdout their output, and its end (launcher gone, network lost) ends the nodes.
For hosts that share nothing with the launcher, ``SshHost(ship_code=True)``
makes the agent run its nodes from the user's code, packed here once and sent
only to hosts whose cache lacks it (``launchers/remote/code_pack.py``), and
``provision=True`` installs the host's requirements first (``provision.py``).
"""

from __future__ import annotations

import shlex

from launchpad_py import errors, flags
from launchpad_py.launchers.remote import code_pack, launch as remote
from launchpad_py.launchers.remote.host_agents import AgentStarter, HostAgent
from launchpad_py.supervision.controller import ProgramController
from launchpad_py.launchers.options import LaunchOptions
from launchpad_py.launchers.ssh.host import SshHost, check_hosts
from launchpad_py.launchers.ssh.provision import provision_hosts
from launchpad_py.program import Program

_AGENT_COMMAND = ['-m', 'launchpad_py.node_side.host_agent']


def _default_hosts() -> list[SshHost]:
    """The hosts of --lp_ssh_hosts, for groups that resources do not place."""
    options = shlex.split(flags.value_or_default(flags.SSH_OPTIONS))
    python = flags.value_or_default(flags.SSH_PYTHON) or None
    return [SshHost(name, ssh_options=options, python=python)
            for name in flags.value_or_default(flags.SSH_HOSTS)]


def _hosts_of_groups(program: Program, resources: dict) -> dict[str, list[SshHost]]:
    hosts = {}
    defaults = _default_hosts()
    for position, group in enumerate(program.groups):
        spec = resources.get(group)
        if spec is None and defaults:  # Each group starts on the next host, to spread them.
            spec = defaults[position % len(defaults):] + defaults[:position % len(defaults)]
        if spec is None:
            raise errors.ResourcesError(
                f'group {group!r} of program {program.name!r} has no host: pass '
                f"resources={{{group!r}: lp.SshHost('hostname')}} to lp.launch, or name "
                'hosts for every group with --lp_ssh_hosts')
        specs = [spec] if isinstance(spec, SshHost) else spec
        if isinstance(specs, (str, bytes)) or not isinstance(specs, (list, tuple)) or not specs \
                or not all(isinstance(s, SshHost) for s in specs):
            raise errors.ResourcesError(
                f'resources[{group!r}] must be lp.SshHost(...) or a non-empty list of them for '
                f'ssh (got {spec!r})')
        hosts[group] = list(specs)
    return hosts


def _code_packs(hosts) -> dict[SshHost, code_pack.CodePack]:
    """The code each shipping host gets: one pack per distinct set of directories."""
    packs, made = {}, {}
    for host in hosts:
        if host.ships_code:
            paths = tuple(code_pack.user_paths() if host.ship_code in (True, None)
                          else host.ship_code)
            if paths not in made:
                made[paths] = code_pack.make(list(paths))
            packs[host] = made[paths]
    return packs


def launch_ssh(program: Program, options: LaunchOptions) -> ProgramController:
    if options.serialize_py_nodes is False:
        raise errors.ProgramError('ssh always serializes nodes to ship them to their hosts; '
                                  'leave serialize_py_nodes unset')
    hosts = _hosts_of_groups(program, dict(options.local_resources or {}))
    provisioned = provision_hosts(sorted({h for hs in hosts.values() for h in hs}, key=repr))
    hosts = {label: [provisioned[h] for h in group_hosts] for label, group_hosts in hosts.items()}
    # A group's nodes go round-robin over its hosts; colocated nodes are one node, one host.
    chosen = {(label, node.index): group_hosts[node.index % len(group_hosts)]
              for label, group_hosts in hosts.items() for node in program.groups[label]}
    # Nodes added to an elastic group later go round-robin over all its hosts: check them now.
    growing = {host for label in program.elastic_groups for host in hosts.get(label, ())}
    launcher_ips = check_hosts(sorted(set(chosen.values()) | growing, key=repr))
    hide_gpus = any(h.gpus is not None for h in set(chosen.values()) | growing)
    # One agent per host (as SshHost names it, with its env and GPUs), opened by its first node.
    packs = _code_packs(launcher_ips)
    agents = {host: HostAgent(host.ssh_argv(host.remote_command(_AGENT_COMMAND, hide_gpus)),
                              host.name, packs.get(host)) for host in launcher_ips}

    def place(label: str, index: int) -> remote.Placement:
        host = hosts[label][index % len(hosts[label])]
        agent = agents[host]
        return remote.Placement(argv=agent.argv, host=host.name, launcher_ip=launcher_ips[host],
                                starter=AgentStarter(agent))

    def close_agents() -> None:
        for agent in agents.values():
            agent.close(program_over=program.name)

    placements = {(label, node.index): place(label, node.index)
                  for label in hosts for node in program.groups[label]}
    try:
        return remote.launch(program, options, 'ssh', placements, place_new=place,
                             on_finish=close_agents)
    except BaseException:
        close_agents()  # Idempotent; a launch that failed after its start closed them already.
        raise
