"""The program's secret as the remote backends' starters see it (ray's and slurm's cleanup)."""

from launchpad_py.launchers.remote.seen_secret import SeenSecret


def test_the_first_bootstrap_names_the_secret_and_later_ones_change_nothing():
    """Before any start there is none; the first bootstrap's secret is kept (a restart's
    bootstrap, or a stray one, does not replace it)."""
    seen = SeenSecret()
    assert seen.value is None
    seen.saw({'secret': 'ab' * 32})
    seen.saw({'secret': 'cd' * 32})
    assert seen.value == bytes.fromhex('ab' * 32)
