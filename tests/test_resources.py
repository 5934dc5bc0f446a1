"""Per-group resources under local_mp (env, GPUs, JAX presets) and the node context."""

from __future__ import annotations

import pytest

import launchpad_py as lp
from nodes_for_node_types import reporter_program

NAMES = ['ROLE', 'CUDA_VISIBLE_DEVICES', 'XLA_PYTHON_CLIENT_PREALLOCATE',
         'XLA_PYTHON_CLIENT_MEM_FRACTION', 'JAX_PLATFORMS']


def test_each_group_sees_its_environment_and_gpus(monkeypatch):
    """Every group's processes get its env, CUDA_VISIBLE_DEVICES and JAX presets."""
    monkeypatch.delenv('CUDA_VISIBLE_DEVICES', raising=False)
    program, handles = reporter_program('resources', {'learner': 1, 'actor': 2, 'evaluator': 1})
    resources = {
        'learner': lp.PythonProcess(env={'ROLE': 'learner'}, gpus=[0, 1], jax_preallocate=False,
                                    jax_memory_fraction=0.45),
        'actor': lp.PythonProcess(env={'ROLE': 'actor'}, gpus=[], jax_platforms='cpu'),
    }
    with lp.launch(program, launch_type='local_mp', local_resources=resources):
        seen = {(group, i): handle.dereference().env(NAMES)
                for group, group_handles in handles.items()
                for i, handle in enumerate(group_handles)}
    assert seen[('learner', 0)] == {
        'ROLE': 'learner', 'CUDA_VISIBLE_DEVICES': '0,1', 'XLA_PYTHON_CLIENT_PREALLOCATE': 'false',
        'XLA_PYTHON_CLIENT_MEM_FRACTION': '0.45', 'JAX_PLATFORMS': None}
    for i in (0, 1):
        assert seen[('actor', i)] == {
            'ROLE': 'actor', 'CUDA_VISIBLE_DEVICES': '', 'XLA_PYTHON_CLIENT_PREALLOCATE': None,
            'XLA_PYTHON_CLIENT_MEM_FRACTION': None, 'JAX_PLATFORMS': 'cpu'}
    # A group without resources keeps the launcher's GPUs (docs/gpus.md), sharing them.
    assert seen[('evaluator', 0)]['CUDA_VISIBLE_DEVICES'] is None
    assert seen[('evaluator', 0)]['XLA_PYTHON_CLIENT_PREALLOCATE'] == 'false'


def test_gpus_are_left_alone_when_no_group_names_any(monkeypatch):
    """Without gpus anywhere, node processes inherit the launcher's CUDA_VISIBLE_DEVICES."""
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '3')
    program, handles = reporter_program('resources', {'worker': 1})
    resources = {'worker': lp.PythonProcess(env={'ROLE': 'worker'})}
    with lp.launch(program, launch_type='local_mp', local_resources=resources):
        seen = handles['worker'][0].dereference().env(NAMES)
    assert (seen['ROLE'], seen['CUDA_VISIBLE_DEVICES']) == ('worker', '3')


@pytest.mark.parametrize('launch_type', ['test_mt', 'test_mp'])
def test_node_knows_its_label_and_index(launch_type):
    """lp.get_node_context() gives each node its group label and index, in handler threads too."""
    program, handles = reporter_program('resources', {'actor': 3, 'learner': 1})
    with lp.launch(program, launch_type=launch_type):
        contexts = [h.dereference().context() for group in handles.values() for h in group]
    assert contexts == [('actor', 0), ('actor', 1), ('actor', 2), ('learner', 0)]


def test_threads_of_a_node_process_know_their_node():
    """In a process of its own, threads a node starts itself fall back to the node's context."""
    program, handles = reporter_program('resources', {'actor': 2})
    with lp.launch(program, launch_type='test_mp'):
        assert handles['actor'][1].dereference().context_from_side_thread() == ('actor', 1)


def test_node_context_outside_a_node_is_an_error():
    """Asking for the node context outside any node says where it can be used."""
    with pytest.raises(lp.NotRunningError, match='outside a node'):
        lp.get_node_context()


@pytest.mark.parametrize('kwargs, error, message', [
    ({'gpus': '0'}, TypeError, 'list of GPU indices'),
    ({'gpus': [-1]}, TypeError, r'\[-1\]'),
    ({'jax_memory_fraction': 1.5}, ValueError, r'\(0, 1\].*1\.5'),
    ({'jax_preallocate': 'no'}, TypeError, "'no'"),
    ({'jax_platforms': ''}, TypeError, "''"),
    ({'gpus': [0], 'env': {'CUDA_VISIBLE_DEVICES': '1'}}, lp.ResourcesError, 'CUDA_VISIBLE_DEVICES'),
])
def test_bad_resources_are_refused(kwargs, error, message):
    """Malformed GPU or JAX settings fail when the spec is made, naming the value."""
    with pytest.raises(error, match=message):
        lp.PythonProcess(**kwargs)


def test_env_and_presets_may_agree():
    """Setting a variable both ways is fine when the values agree."""
    spec = lp.PythonProcess(env={'JAX_PLATFORMS': 'cpu'}, jax_platforms='cpu', gpus=[])
    assert spec.environment() == {'JAX_PLATFORMS': 'cpu', 'CUDA_VISIBLE_DEVICES': ''}


def test_ssh_host_checks_its_fields_naming_the_host():
    """SshHost rejects a bad port, env, gpus or ssh_options, naming the host and the value."""
    with pytest.raises(ValueError, match=r"port must be an int in 1\.\.65535 \(got 0 for 'h1'\)"):
        lp.SshHost('h1', port=0)
    with pytest.raises(TypeError, match=r"env must map .*\{'A': 1\} for 'h1'"):
        lp.SshHost('h1', env={'A': 1})
    with pytest.raises(TypeError, match=r"gpus must be .*got '0' for 'h1'"):
        lp.SshHost('h1', gpus='0')
    with pytest.raises(TypeError, match=r"ssh_options must be a list .*got '-v' for 'h1'"):
        lp.SshHost('h1', ssh_options='-v')
    with pytest.raises(TypeError, match="host must be a host name"):
        lp.SshHost('')


def test_ssh_resources_must_be_ssh_hosts():
    """Under ssh, a group's resources must be SshHost or a list of them."""
    program = lp.Program('p')
    program.add_node(lp.PyNode(print), label='printer')
    with pytest.raises(lp.ResourcesError, match=r"resources\['printer'\] must be lp.SshHost"):
        lp.launch(program, launch_type='ssh', resources={'printer': lp.PythonProcess()})
