"""The code pack (launcher side) and the host's code cache (agent side), without hosts."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import subprocess
import sys
import tarfile

import pytest

import launchpad_py as lp
from launchpad_py.launchers.remote import code_pack
from launchpad_py.node_side import code_cache


def _project(root, text='VALUE = 1\n'):
    (root / 'pkg').mkdir(parents=True, exist_ok=True)
    (root / 'pkg' / '__init__.py').write_text(text)
    (root / 'main.py').write_text('import pkg\n')
    return root


def test_same_files_give_the_same_digest_and_a_change_another(tmp_path):
    """The pack is deterministic (no times, owners, order), so it names its content."""
    first = code_pack.make([str(_project(tmp_path / 'a'))])
    os.utime(tmp_path / 'a' / 'main.py', (0, 0))
    again = code_pack.make([str(tmp_path / 'a')])
    elsewhere = code_pack.make([str(_project(tmp_path / 'b'))])
    changed = code_pack.make([str(_project(tmp_path / 'a', 'VALUE = 2\n'))])
    assert first.digest == again.digest == elsewhere.digest != changed.digest
    assert first.digest == hashlib.sha256(first.data).hexdigest()


def test_gitignore_is_honoured_in_a_git_tree(tmp_path):
    """Ignored files stay out; untracked ones that are not ignored go."""
    root = _project(tmp_path)
    (root / '.gitignore').write_text('data/\n')
    (root / 'data').mkdir()
    (root / 'data' / 'big.bin').write_bytes(b'x' * 1000)
    subprocess.run(['git', 'init', '-q', str(root)], check=True)
    pack = code_pack.make([str(root)])
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(pack.data))) as tar:
        names = sorted(tar.getnames())
    assert names == ['launchpad_code.json', 'p0/.gitignore', 'p0/main.py', 'p0/pkg/__init__.py']


def test_user_paths_leave_out_the_interpreter_venvs_and_site_packages(tmp_path, monkeypatch):
    """Only the working directory and the user's own entries of sys.path are packed."""
    mine = _project(tmp_path / 'mine')
    site = tmp_path / 'lib' / 'site-packages'
    site.mkdir(parents=True)
    venv = tmp_path / 'venv'
    venv.mkdir()
    (venv / 'pyvenv.cfg').write_text('home = /usr/bin\n')
    monkeypatch.chdir(mine)
    monkeypatch.setattr(sys, 'path', ['', str(mine), str(site), str(venv), sys.prefix + '/lib'])
    assert code_pack.user_paths() == [os.path.realpath(mine)]


def test_over_the_limit_names_size_limit_file_and_remedy(tmp_path):
    """A pack past the limit is refused before anything is packed or sent."""
    root = _project(tmp_path)
    (root / 'weights.bin').write_bytes(b'\0' * 300_000)
    with pytest.raises(lp.LaunchError, match=r'is 0\.3 MB .* over the limit of 0\.1 MB; the '
                                             r"largest is '.*weights\.bin'\. Add data"):
        code_pack.make([str(root)], limit=0.1)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path / 'cache'))
    return tmp_path / 'cache' / 'launchpad_py' / 'code'


def test_installed_pack_is_private_found_again_and_run_from(tmp_path, cache, monkeypatch):
    """install checks and unpacks (0700); lookup finds it; activate runs from its first dir."""
    pack = code_pack.make([str(_project(tmp_path / 'src'))])
    assert code_cache.lookup(pack.digest) is None
    path = code_cache.install(pack.digest, pack.data)
    assert path == str(cache / pack.digest) == code_cache.lookup(pack.digest)
    for directory in (cache, cache / pack.digest):
        assert os.stat(directory).st_mode & 0o777 == 0o700
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, 'path', list(sys.path))
    monkeypatch.setenv('PYTHONPATH', '')
    entries = code_cache.activate(path)
    assert os.getcwd() == entries[0] and sys.path[0] == entries[0]
    assert open('pkg/__init__.py').read() == 'VALUE = 1\n'


def test_pack_not_matching_its_digest_is_refused(tmp_path, cache):
    """Bytes that do not hash to the digest asked for are never unpacked."""
    pack = code_pack.make([str(_project(tmp_path))])
    with pytest.raises(ValueError, match='does not match its digest'):
        code_cache.install(pack.digest, pack.data + b'x')
    assert not (cache / pack.digest).exists()


def test_member_escaping_the_pack_is_refused(tmp_path, cache):
    """A pack whose member climbs out with '..' is refused, and nothing is left behind."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode='w') as tar:
        info = tarfile.TarInfo('p0/../../escaped.py')
        info.size = 1
        tar.addfile(info, io.BytesIO(b'x'))
    data = gzip.compress(raw.getvalue())
    with pytest.raises(ValueError, match='refusing pack member'):
        code_cache.install(hashlib.sha256(data).hexdigest(), data)
    assert os.listdir(cache) == []


def test_entry_opened_to_others_is_not_trusted_and_replaced(tmp_path, cache):
    """An entry not 0700 is not used; installing again sets it aside and puts a good one."""
    pack = code_pack.make([str(_project(tmp_path))])
    path = code_cache.install(pack.digest, pack.data)
    os.chmod(path, 0o755)
    assert code_cache.lookup(pack.digest) is None
    assert code_cache.install(pack.digest, pack.data) == path
    assert code_cache.lookup(pack.digest) == path
    assert any('.untrusted-' in name for name in os.listdir(cache))


def test_agent_ending_before_it_took_the_code_fails_the_start_at_once(tmp_path):
    """A host agent session that ends before answering about the code fails the node's start
    with why (its exit and last words), without waiting out the code timeout."""
    from launchpad_py.launchers.remote.host_agents import AgentStarter, HostAgent
    pack = code_pack.make([str(_project(tmp_path))])
    agent = HostAgent(['sh', '-c', 'read line; echo "no python here" >&2; exit 3'], 'x', pack)
    try:
        with pytest.raises(OSError, match=r'could not be put in use on x: the agent session '
                                          r'ended \(exited with code 3: no python here\)'):
            agent.start(AgentStarter(agent), {})
    finally:
        agent.close()


@pytest.mark.parametrize('options, error', [
    ({'ship_code': '.'}, "ship_code must be True, False or a non-empty list of existing "
                         "directories (got '.' for 'h1')"),
    ({'requirements': ['numpy>=1.24', 'not a requirement']},
     "requirements: 'not a requirement' is not a requirement such as 'numpy'"),
    ({'requirements': 'numpy'}, "requirements must be a list of strings"),
    ({'provision': True}, 'provision=True needs requirements=[...] to install'),
])
def test_bad_shipping_options_are_named(options, error):
    """SshHost says which option is wrong, with the value, before any host is asked."""
    with pytest.raises((TypeError, ValueError), match=re.escape(error)):
        lp.SshHost('h1', **options)


def test_shipping_host_runs_from_its_home_without_the_launchers_import_path():
    """With ship_code the agent starts in the host's $HOME, not at the launcher's paths."""
    command = lp.SshHost('h1', ship_code=True, python='/opt/lp/env/bin/python').remote_command(
        ['-m', 'launchpad_py.node_side.host_agent'])
    assert command.startswith('cd "$HOME" ')
    assert 'PYTHONPATH' not in command and os.getcwd() not in command
