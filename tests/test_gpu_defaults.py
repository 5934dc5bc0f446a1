"""The GPU defaults of local_mp (docs/gpus.md): nobody loses a GPU silently, nobody hogs one."""

from __future__ import annotations

import logging

import pytest

import launchpad_py as lp
from launchpad_py.node_side import devices
from launchpad_py.launchers.local.resources import apply_gpu_defaults
from gpu_probe import JaxProbe
from nodes_for_node_types import ContextReporter, reporter_program

NAMES = ['CUDA_VISIBLE_DEVICES', 'JAX_PLATFORMS', 'XLA_PYTHON_CLIENT_PREALLOCATE',
         'TF_FORCE_GPU_ALLOW_GROWTH']
GPU_VARIABLES = NAMES + ['XLA_PYTHON_CLIENT_MEM_FRACTION', 'XLA_PYTHON_CLIENT_ALLOCATOR']


@pytest.fixture(autouse=True)
def _launcher_without_gpu_settings(monkeypatch):
    for name in GPU_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _launch_and_read(groups, resources):
    program, handles = reporter_program('gpu_defaults', groups)
    with lp.launch(program, launch_type='test_mp', local_resources=resources):
        return {group: [h.dereference().env(NAMES) for h in group_handles]
                for group, group_handles in handles.items()}


def test_learner_keeps_the_gpus_that_actors_hide_from_themselves(monkeypatch):
    """Actors with CUDA_VISIBLE_DEVICES='' leave the unconfigured learner the launcher's GPUs."""
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '0')
    hidden = lp.PythonProcess(env={'CUDA_VISIBLE_DEVICES': ''})
    seen = _launch_and_read({'learner': 1, 'actor': 2}, {'actor': hidden})
    # The only process that sees the GPU keeps JAX's defaults (preallocation included).
    assert seen['learner'][0] == {'CUDA_VISIBLE_DEVICES': '0', 'JAX_PLATFORMS': None,
                                  'XLA_PYTHON_CLIENT_PREALLOCATE': None,
                                  'TF_FORCE_GPU_ALLOW_GROWTH': None}


def test_a_group_kept_off_gpus_runs_jax_on_the_cpu():
    """gpus=[] also sets JAX_PLATFORMS=cpu, so JAX never tries (and fails) to start CUDA."""
    seen = _launch_and_read({'actor': 2}, {'actor': lp.PythonProcess(gpus=[])})
    assert seen['actor'] == [{'CUDA_VISIBLE_DEVICES': '', 'JAX_PLATFORMS': 'cpu',
                              'XLA_PYTHON_CLIENT_PREALLOCATE': None,
                              'TF_FORCE_GPU_ALLOW_GROWTH': None}] * 2


def test_jax_in_a_group_kept_off_gpus_tries_no_accelerator():
    """With gpus=[], JAX starts its CPU backend only: no CUDA attempt, so no CUDA traceback."""
    pytest.importorskip('jax')
    program = lp.Program('jax_off_gpus')
    with program.group('actor'):
        probe = program.add_node(lp.CourierNode(JaxProbe))
    with lp.launch(program, launch_type='test_mp',
                   local_resources={'actor': lp.PythonProcess(gpus=[])}):
        platform, messages = probe.dereference().backends_tried()
    assert platform == 'cpu'
    assert messages == ["Initializing backend 'cpu'", "Backend 'cpu' initialized"]


def test_processes_that_may_share_a_gpu_do_not_preallocate():
    """Several processes that see the same GPUs allocate on demand, in JAX and TensorFlow."""
    seen = _launch_and_read({'learner': 1, 'actor': 2}, {'learner': lp.PythonProcess(gpus=[0])})
    sharing = {'XLA_PYTHON_CLIENT_PREALLOCATE': 'false', 'TF_FORCE_GPU_ALLOW_GROWTH': 'true'}
    assert seen['learner'][0] == {'CUDA_VISIBLE_DEVICES': '0', 'JAX_PLATFORMS': None, **sharing}
    assert seen['actor'] == [{'CUDA_VISIBLE_DEVICES': None, 'JAX_PLATFORMS': None, **sharing}] * 2


def test_a_single_process_keeps_jax_defaults():
    """One process alone on its GPUs gets no preset at all."""
    seen = _launch_and_read({'learner': 1}, {})
    assert seen['learner'][0] == dict.fromkeys(NAMES)


def test_separate_gpus_are_not_shared():
    """Groups on different GPUs, or hidden from all, keep their own preallocation."""
    resources, _ = apply_gpu_defaults({'a': lp.PythonProcess(gpus=[0]),
                                       'b': lp.PythonProcess(gpus=[1]),
                                       'c': lp.PythonProcess(gpus=[])},
                                      {'a': 1, 'b': 1, 'c': 3}, {})
    assert [resources[g].environment() for g in 'abc'] == [
        {'CUDA_VISIBLE_DEVICES': '0'}, {'CUDA_VISIBLE_DEVICES': '1'},
        {'CUDA_VISIBLE_DEVICES': '', 'JAX_PLATFORMS': 'cpu'}]


@pytest.mark.parametrize('chosen', [{'jax_preallocate': True}, {'jax_memory_fraction': 0.3},
                                    {'jax_platforms': 'cuda'},
                                    {'env': {'TF_FORCE_GPU_ALLOW_GROWTH': 'false'}}])
def test_the_users_settings_win(chosen):
    """A JAX or TensorFlow setting the group chose is never replaced by a default."""
    spec = lp.PythonProcess(gpus=[0], **chosen)
    resources, _ = apply_gpu_defaults({'a': spec, 'b': spec}, {'a': 1, 'b': 1}, {})
    environment = resources['a'].environment()
    assert {k: environment[k] for k in spec.environment()} == spec.environment()
    if 'jax_preallocate' in chosen or 'jax_memory_fraction' in chosen:
        assert environment.get('XLA_PYTHON_CLIENT_PREALLOCATE') != 'false'


def test_the_launchers_own_settings_win():
    """A preallocation setting exported in the launcher's environment is left to the nodes."""
    resources, _ = apply_gpu_defaults({}, {'a': 2}, {'XLA_PYTHON_CLIENT_MEM_FRACTION': '0.2'})
    assert resources['a'].environment() == {'TF_FORCE_GPU_ALLOW_GROWTH': 'true'}


def test_groups_kept_off_gpus_are_named_in_one_log_line(caplog):
    """One INFO line names every group the resources keep off GPUs; no other line about it."""
    hidden = lp.PythonProcess(gpus=[])
    program, _ = reporter_program('gpu_defaults', {'learner': 1, 'actor': 2, 'evaluator': 1})
    with caplog.at_level(logging.INFO, logger='launchpad_py.launchers'):
        with lp.launch(program, launch_type='test_mp',
                       local_resources={'actor': hidden, 'evaluator': hidden}):
            pass
    lines = [r.getMessage() for r in caplog.records if 'GPU' in r.getMessage()]
    assert lines == ["test_mp: groups 'actor', 'evaluator' run without GPUs (CUDA_VISIBLE_"
                     "DEVICES=''; JAX on the CPU unless jax_platforms says otherwise)"]


def test_colocated_children_sharing_gpus_do_not_preallocate():
    """A MultiProcessingColocation's children, which share its GPUs, allocate on demand."""
    program = lp.Program('colocated')
    nodes = [lp.CourierNode(ContextReporter) for _ in range(2)]
    program.add_node(lp.MultiProcessingColocation(nodes), label='actors')
    with lp.launch(program, launch_type='test_mp'):
        seen = [node.create_handle().dereference().env(NAMES) for node in nodes]
    assert seen == [{'CUDA_VISIBLE_DEVICES': None, 'JAX_PLATFORMS': None,
                     'XLA_PYTHON_CLIENT_PREALLOCATE': 'false',
                     'TF_FORCE_GPU_ALLOW_GROWTH': 'true'}] * 2


def test_the_examples_learner_gets_the_gpus_its_actors_leave():
    """examples.actor_learner keeps actors and evaluator on the CPU and leaves the learner alone."""
    from examples.actor_learner.program import Config, cpu_only_resources, make_program
    program = make_program(Config(num_actors=8))
    counts = {group: len(nodes) for group, nodes in program.groups.items()}
    resources, lines = apply_gpu_defaults(cpu_only_resources(), counts,
                                          {'CUDA_VISIBLE_DEVICES': '0'})
    assert 'learner' not in resources
    assert resources['actor'].environment() == {'CUDA_VISIBLE_DEVICES': '',
                                                'JAX_PLATFORMS': 'cpu'}
    assert lines == ["groups 'actor', 'evaluator' run without GPUs (CUDA_VISIBLE_DEVICES=''; "
                     "JAX on the CPU unless jax_platforms says otherwise)"]


@pytest.mark.parametrize('value, expected', [
    (None, devices.ALL), ('', frozenset()), ('0,2', frozenset({'0', '2'})),
    ('1,-1,2', frozenset({'1'})), ('-1', frozenset()), ('GPU-8f2a', frozenset({'GPU-8f2a'}))])
def test_visible_gpus_reads_cuda_visible_devices(value, expected):
    """CUDA_VISIBLE_DEVICES is read as CUDA does: unset is every GPU, a negative index ends it."""
    assert devices.visible_gpus(value) == expected


@pytest.mark.parametrize('a, b, shared', [
    (None, None, True), (None, '', False), ('0', '1', False), ('0,1', '1', True),
    ('GPU-8f2a', '0', True), ('', '', False)])
def test_may_share(a, b, shared):
    """Sets of GPUs meet when they overlap; a UUID may be any index."""
    assert devices.may_share(devices.visible_gpus(a), devices.visible_gpus(b)) is shared
