"""Failures that are not the node's fault: a lost host restarts its nodes, uncounted.

Under ssh the launcher reaches each host through one session running its agent; when
that session drops without the launcher ending it, the host was lost, not the node:
an ``lp.Restart`` group restarts the node there (a new session) without counting the
restart against ``max_restarts``, and the reason shows in statuses, the status table
and Prometheus.
"""

from __future__ import annotations

import subprocess

import psutil
import pytest

import launchpad_py as lp
from launchpad_py import courier
from launchpad_py.cli import status as status_cli
from launchpad_py.launchers.slurm import host_steps
from launchpad_py.observability import prometheus
from conftest import (SLURM_LOGS, launch, needs_slurm, needs_ssh_hosts, slurm_cluster, ssh_host,
                      wait_for)
from restart_nodes import Member
from test_slurm import _job_of

_ONE = lp.Restart(max_restarts=1, backoff=(0.05, 0.2))


def _member(controller):
    return next(s for s in controller.statuses() if s.label == 'member')


def _drop_session_to(host: str) -> None:
    """Kills the launcher's ssh session to ``host`` (as a network cut would end it)."""
    sessions = [p for p in psutil.Process().children(recursive=True)
                if p.name() == 'ssh' and host in p.cmdline()]
    assert len(sessions) == 1, [p.cmdline() for p in sessions]
    sessions[0].kill()


def _back_after(controller, restarts: int):
    wait_for(lambda: _member(controller).restarts == restarts
             and _member(controller).state == lp.NodeState.RUNNING, timeout=60,
             what=f'restart {restarts}')


@needs_ssh_hosts
def test_a_lost_host_restarts_its_node_without_counting_against_max_restarts():
    """Two lost sessions with max_restarts=1: both restarts happen, neither is counted, and
    a crash of the node's own after them is still allowed its one counted restart."""
    program = lp.Program('lost_host')
    handle = program.add_node(lp.CourierNode(Member), label='member')
    host = ssh_host('h2')  # (p2 with LP_SSH_TEST_HOSTS=p.)
    with lp.launch(program, launch_type='ssh', resources={'member': host},
                   failure_policy={'member': _ONE}) as controller:
        client = handle.dereference()
        for restarts in (1, 2):
            _drop_session_to(host.host)
            _back_after(controller, restarts)
        assert _member(controller).restart_reasons == {'host_lost': 2}
        assert client.who()['pid'] == _member(controller).pid
        psutil.Process(_member(controller).pid).kill()  # The node's own crash: counted.
        _back_after(controller, 3)
        assert _member(controller).restart_reasons == {'host_lost': 2, 'failed': 1}
        assert controller.is_running
        statistics = controller.statistics()
        metrics = prometheus.exposition('lost_host', statistics)
        assert ('lp_node_restarts_by_reason_total{program="lost_host",node="member/0",'
                'reason="host_lost"} 2') in metrics
        table = status_cli.format_table({'program': 'lost_host', 'launch_type': 'ssh',
                                         'running': True,
                                         'nodes': [n.to_dict() for n in statistics]})
        assert '3 (host_lost 2)' in table


@needs_ssh_hosts
def test_uncounted_restarts_are_bounded_by_max_uncounted():
    """lp.Restart(max_uncounted=1): the first lost session restarts the node, uncounted; the
    second stops the program, its failure naming the node, the reason and the count (before
    max_uncounted, a host that kept being lost restarted its nodes forever)."""
    program = lp.Program('lost_twice')
    program.add_node(lp.CourierNode(Member), label='member')
    host = ssh_host('h3')
    policy = lp.Restart(max_restarts=5, backoff=(0.05, 0.2), max_uncounted=1)
    controller = lp.launch(program, launch_type='ssh', resources={'member': host},
                           failure_policy={'member': policy})
    try:
        _drop_session_to(host.host)
        _back_after(controller, 1)
        _drop_session_to(host.host)
    finally:
        with pytest.raises(lp.NodeFailedError) as failed:
            controller.wait(timeout=60)
    member = _member(controller)
    assert member.state == lp.NodeState.FAILED
    assert member.restart_reasons == {'host_lost': 1}
    assert ('lp_node_restarts_by_reason_total{program="lost_twice",node="member/0",'
            'reason="host_lost"} 1') in prometheus.exposition('lost_twice',
                                                               controller.statistics())
    message = str(failed.value)
    assert "'member'" in message and 'lost by host_lost' in message, message
    assert 'restarted 1 times after losses that were not its fault (host_lost 1)' in message
    assert 'lp.Restart(max_uncounted=1)' in message


def _agent_steps(job: str) -> dict[str, str]:
    """The job's agent steps: host -> step id ('job.step')."""
    listed = subprocess.run(['squeue', '-h', '-s', '-j', job, '-o', '%i %j'], capture_output=True,
                            text=True, timeout=30).stdout.split('\n')
    return {name.removeprefix('lp-agent-'): step for step, _, name in
            (line.partition(' ') for line in listed if line.strip())
            if name.startswith('lp-agent-')}


@needs_slurm
def test_under_slurm_a_host_step_ended_by_slurm_restarts_its_node_uncounted():
    """steps='host': Slurm kills the agent's step of the member's host (the job still runs);
    the member comes back through a new agent step on that host, the restart not counted."""
    slurm_cluster()
    program = lp.Program('lost_slurm_step')
    handle = program.add_node(lp.CourierNode(Member), label='member')
    with launch(program, 'slurm', slurm_options={'steps': 'host', 'output_dir': SLURM_LOGS},
                failure_policy={'member': lp.Restart(max_restarts=0)}) as controller:
        before = _member(controller)
        job = _job_of(before.pid)
        step = _agent_steps(job)[before.host]
        subprocess.run(['scancel', '--signal=KILL', step], check=True, timeout=30)
        _back_after(controller, 1)
        after = _member(controller)
        assert after.restart_reasons == {'host_lost': 1} and after.host == before.host
        assert handle.dereference().who()['pid'] == after.pid != before.pid
        assert _agent_steps(job)[after.host] != step


def _set_host_state(host: str, state: str) -> None:
    """scontrol's node state; 'resume' also when the host came back by itself already (the
    test cluster's ReturnToService=2 returns a host whose slurmd answers), then checked."""
    subprocess.run(['scontrol', 'update', f'nodename={host}', f'state={state}',
                    *(['reason=launchpad_py test'] if state == 'down' else [])],
                   check=state == 'down', timeout=30, capture_output=True)
    if state == 'resume':
        wait_for(lambda: not host_steps.node_failed(host), what=f'{host} to be up again')


# steps='host': 12 CPUs each, two of the 16-CPU hosts, the agent's step holding all their
# CPUs. steps='node': 9 CPUs each, one per host, the elastic room holding a third host where
# the lost node's new step fits.
_FAILED_HOST_LAYOUTS = {
    'host': ({'steps': 'host'}, 12, False),
    'node': ({'steps': 'node', 'elastic_room': 1}, 9, True),
}


@needs_slurm
@pytest.mark.parametrize('steps', sorted(_FAILED_HOST_LAYOUTS))
def test_under_slurm_a_failed_host_restarts_its_node_on_another_host_uncounted(steps):
    """Slurm marks the host of one of two members down; the job goes on without it (the
    launcher's salloc asks --no-kill), and the member comes back on another host of the job,
    restart_reasons node_failure, uncounted; a client follows it there. With a step per node
    too (before, its failed step counted as the node's own failure)."""
    slurm_cluster()
    slurm_options, cpus, elastic = _FAILED_HOST_LAYOUTS[steps]
    program = lp.Program(f'failed_slurm_{steps}')
    with program.group('member', elastic=elastic):
        handles = [program.add_node(lp.CourierNode(Member)) for _ in range(2)]
    with launch(program, 'slurm', resources={'member': lp.SlurmResources(cpus=cpus)},
                slurm_options={**slurm_options, 'output_dir': SLURM_LOGS},
                failure_policy={'member': lp.Restart(max_restarts=0)}) as controller:
        status = lambda: next(s for s in controller.statuses() if s.index == 1)
        before = status()
        others = {s.host for s in controller.statuses()} - {before.host}
        assert len(others) == 1, controller.statuses()
        old_address = handles[1].address.resolve()
        _set_host_state(before.host, 'down')
        try:
            wait_for(lambda: status().restart_reasons == {'node_failure': 1}
                     and status().state == lp.NodeState.RUNNING, timeout=120,
                     what=f'member/1 to come back after {before.host} failed')
            after = status()
            assert after.host != before.host
            client = handles[1].dereference()
            try:
                seen = client.who()['pid']
            except courier.CourierUnavailableError:  # The one failed call; then it follows.
                seen = client.who()['pid']
            assert seen == after.pid != before.pid
            assert handles[1].address.resolve().split(':')[0] != old_address.split(':')[0]
        finally:
            _set_host_state(before.host, 'resume')
