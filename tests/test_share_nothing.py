"""Hosts that share nothing but the network: p1..p3 of scripts/private_hosts.sh.

Each runs its own sshd in its own mount namespace: a private /tmp, /home, /root and
/dev/shm, its own python (/opt/lp/env), and neither this checkout nor the launcher's
venv. A node that leans on a path of the launcher's fails here. They still share this
machine's process table, so the launcher-death test sees every host's processes.
"""

from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import sys
import uuid

import pytest

import launchpad_py as lp
from conftest import (PRIVATE_DIR, PRIVATE_PYTHON, REPO, launcher_report, marked_processes,
                      needs_ssh_hosts, private_host, slow, wait_for)
from launchpad_py.launchers.remote import code_pack
from nodes_for_tests import serve_forever
import share_nothing_project

pytestmark = needs_ssh_hosts


def _on(host: str, command: str) -> subprocess.CompletedProcess:
    """Runs ``command`` on a share-nothing host over ssh."""
    private_host(host)  # Skips when they are not up.
    return subprocess.run(['ssh', '-F', os.path.join(PRIVATE_DIR, 'ssh_config'), host, command],
                          capture_output=True, text=True, timeout=60)


def test_file_in_tmp_of_one_host_is_seen_nowhere_else():
    """A file written in /tmp on p1 is there for p1's next session, not here, not on p2."""
    path = f'/tmp/lp-private-probe-{uuid.uuid4().hex}'
    assert _on('p1', f'echo p1 > {path}').returncode == 0
    assert _on('p1', f'cat {path}').stdout == 'p1\n'
    assert not os.path.exists(path)
    assert _on('p2', f'test -e {path}').returncode == 1


def test_checkout_and_launcher_python_are_not_there():
    """Neither this checkout, nor the launcher's interpreter, nor its /tmp exist on p1."""
    listing = f"{REPO} {sys.executable} {os.path.expanduser('~/.pyenv')} /tmp/lp-ssh"
    done = _on('p1', f'for p in {listing}; do test -e "$p" && echo "$p"; done; hostname')
    assert done.stdout.split() == ['lp-p1']


def _run_project(project) -> dict:
    done = subprocess.run([sys.executable, 'main.py'], cwd=project, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_users_own_module_is_shipped_once_and_then_reused(tmp_path):
    """Nodes import the project's own module on p1 and p2; a second launch sends 0 bytes."""
    private_host('p1')
    token = uuid.uuid4().hex  # New content: no host has this pack yet.
    share_nothing_project.write(tmp_path, token, os.path.join(PRIVATE_DIR, 'ssh_config'),
                                PRIVATE_PYTHON)
    first = _run_project(tmp_path)
    answer, seen_token, cwd, hostname = json.loads(
        first['tail'].split('RESULT ', 1)[1].splitlines()[0])
    assert (answer, seen_token, hostname) == (1003, token, 'lp-p2')
    assert cwd.startswith('/root/.cache/launchpad_py/code/')
    assert first['hosts'] == ['p1', 'p2']
    assert first['shipped']['packs_sent'] == 2 and first['shipped']['bytes_sent'] > 0
    second = _run_project(tmp_path)
    assert second['shipped'] == {'bytes_sent': 0, 'packs_sent': 0, 'packs_cached': 2}
    assert token in second['tail']
    digest = os.path.basename(os.path.dirname(cwd))
    mode = _on('p2', f'stat -c "%a %U" /root/.cache/launchpad_py/code/{digest}').stdout.split()
    assert mode == ['700', 'root']


def test_tampered_cache_entry_is_not_used(tmp_path):
    """A cache entry opened up to others (mode 0755) is set aside and the pack sent again."""
    private_host('p1')
    share_nothing_project.write(tmp_path, uuid.uuid4().hex,
                                os.path.join(PRIVATE_DIR, 'ssh_config'), PRIVATE_PYTHON)
    first = _run_project(tmp_path)
    cwd = json.loads(first['tail'].split('RESULT ', 1)[1].splitlines()[0])[2]
    assert _on('p2', f'chmod 755 {os.path.dirname(cwd)}').returncode == 0
    second = _run_project(tmp_path)
    assert (second['shipped']['packs_sent'], second['shipped']['packs_cached']) == (1, 1)


def test_missing_packages_are_named_with_the_exact_pip_line():
    """A missing requirement and a python without launchpad_py: one line each, nothing run."""
    program = lp.Program('missing')
    program.add_node(lp.PyNode(serve_forever), label='needs')
    program.add_node(lp.PyNode(serve_forever), label='bare')
    resources = {'needs': private_host('p1', requirements=['lp_probe_pkg>=1.0', 'numpy']),
                 'bare': private_host('p2', python='/opt/lp/bare/bin/python')}
    with pytest.raises(lp.LaunchError) as info:
        lp.launch(program, launch_type='ssh', resources=resources)
    lines = str(info.value).splitlines()
    assert lines[0] == 'the ssh launcher cannot use these hosts; nothing was started:'
    assert (f"  p1: missing or other versions of ['lp_probe_pkg>=1.0']; install them with: "
            f"{PRIVATE_PYTHON} -m pip install 'lp_probe_pkg>=1.0'") in lines
    assert any(line.startswith('  p2: launchpad_py cannot be imported there') and line.endswith(
        '/opt/lp/bare/bin/python -m pip install launchpad_py==0.1.0') for line in lines), lines


def test_provision_installs_requirements_into_a_cached_venv(capfd):
    """provision=True makes a venv with the requirement on p3 (pip's progress shown), once."""
    host = private_host('p3', requirements=['lp_probe_pkg'], provision=True,
                        pip_args=['--no-index', '--find-links', '/opt/lp/wheels'])
    for _ in range(2):
        program = lp.Program('provisioned')
        program.add_node(lp.PyNode(share_nothing_project.probe_value), label='probe')
        with lp.launch(program, launch_type='ssh', resources={'probe': host}) as controller:
            controller.wait(timeout=120)
            assert 'PROBE 42' in controller.output_tail('probe/0')
    err = capfd.readouterr().err
    assert 'launchpad_py: provision p3: ' in err
    assert 'launchpad_py: provision p3: cached: /root/.cache/launchpad_py/envs/' in err


def test_pack_over_the_limit_is_refused_with_the_remedy(tmp_path, monkeypatch):
    """A 2 MB project against a 1 MB limit: the error names both sizes, the file, the fixes."""
    (tmp_path / 'data.bin').write_bytes(os.urandom(2_000_000))
    monkeypatch.setenv(code_pack.LIMIT_ENV, '1')
    program = lp.Program('big')
    program.add_node(lp.PyNode(serve_forever), label='node')
    with pytest.raises(lp.LaunchError) as info:
        lp.launch(program, launch_type='ssh',
                  resources={'node': private_host('p1', ship_code=[str(tmp_path)])})
    text = str(info.value)
    assert 'the code to ship to the hosts is 2.0 MB' in text
    assert 'over the limit of 1 MB' in text and str(tmp_path / 'data.bin') in text
    assert '.gitignore' in text and 'ship_code=[...]' in text and code_pack.LIMIT_ENV in text


def test_sigkill_of_launcher_leaves_nothing_on_any_host():
    """SIGKILL the launcher of nodes on p1..p3: every node process is gone within seconds."""
    private_host('p1')
    token = f'lp-private-kill-{uuid.uuid4().hex}'
    launcher = subprocess.Popen(
        [sys.executable, os.path.join(REPO, 'tests', 'ssh_nodes.py'), token], cwd=REPO,
        stdout=subprocess.PIPE, text=True,
        env={**os.environ, 'PYTHONPATH': os.path.join(REPO, 'tests'), 'LP_SSH_TEST_HOSTS': 'p'})
    nodes = launcher_report(launcher.stdout)
    assert sorted(host for host, _ in nodes) == ['p1', 'p2', 'p3']
    assert len(marked_processes(token)) >= 3
    launcher.send_signal(signal.SIGKILL)
    launcher.wait(timeout=10)
    launcher.stdout.close()
    wait_for(lambda: not marked_processes(token), timeout=30,
             what=f'processes of {token} to end on p1..p3')


# The paper's four examples: (module, arguments, pattern of the result line, what must match).
# mapreduce and evolution strategies are deterministic: their result lines match exactly
# (times aside). The parameter server's result is a throughput and the actor-learner's an
# asynchronous training run, so those must match in what they reach, not in numbers.
_EXAMPLES = {
    'mapreduce': (['--inputs=examples/*/*.py'], r'^\[output/0\] (output: .*)$'),
    'evolution_strategies': (['--max_generations=60'],
                             r'^\[evolver/0\] evolver: (reached the generation limit after \d+ '
                             r'generations) in [\d.]+s(; fitness of the mean .*)$'),
    'parameter_server': (['--topology=replicated'],
                         r'^\[meter/0\] meter: (\d+ requesters), \d+ queries'),
    'actor_learner': ([], r'^\[evaluator/0\] evaluator: (reached the target return) \('),
}


def _example_result(name: str, launch_type: str) -> tuple[str, ...]:
    arguments, pattern = _EXAMPLES[name]
    flags = [f'--lp_launch_type={launch_type}']
    if launch_type == 'ssh':
        flags += ['--lp_ssh_hosts=p1,p2,p3',
                  f'--lp_ssh_options=-F {os.path.join(PRIVATE_DIR, "ssh_config")}',
                  f'--lp_ssh_python={PRIVATE_PYTHON}', '--lp_ssh_ship_code']
    done = subprocess.run([sys.executable, '-m', f'examples.{name}', *flags, *arguments],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    found = [re.match(pattern, line) for line in (done.stdout + done.stderr).splitlines()]
    results = [m.groups() for m in found if m]
    assert results, f'no result line of {name} under {launch_type}: {done.stderr[-2000:]}'
    return results[-1]


@slow
@pytest.mark.timeout(1500)
@pytest.mark.parametrize('name', list(_EXAMPLES))
def test_paper_example_on_share_nothing_hosts_matches_local_mp(name):
    """Each example over ssh on p1..p3 (code shipped, hosts' own python) gives local_mp's result."""
    private_host('p1')
    assert _example_result(name, 'ssh') == _example_result(name, 'local_mp')
