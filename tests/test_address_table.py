"""The launcher's table of current addresses, for clients whose server moved (remote launches)."""

from __future__ import annotations

from launchpad_py.launchers.remote.address_table import AddressTable


def _asker(table: AddressTable, key: str) -> list:
    answers = []
    table.ask([key], lambda values, gone: answers.append((values, gone)))
    return answers


def test_a_question_about_a_moving_node_waits_for_its_next_report():
    """Once a node's run ended, a client asking where it is waits until the new run reports."""
    table = AddressTable()
    table.learn({'params': '10.0.0.1:1000'})
    assert table.moving({'params': '10.0.0.1:1000'}) == ['10.0.0.1:1000']
    answers = _asker(table, 'params')
    assert answers == []
    table.learn({'params': '10.0.0.2:2000'})
    assert answers == [({'params': '10.0.0.2:2000'}, {})]


def test_the_old_run_ending_after_the_new_one_reported_keeps_the_new_address():
    """A deleted pod is started again before its old run's channel closes: that run ending
    late must not take away the new run's address (found under podman: every client asking
    where the parameter server went waited forever)."""
    table = AddressTable()
    table.learn({'params': '10.0.0.1:1000'})
    table.learn({'params': '10.0.0.1:3000'})  # The new pod reported first.
    assert table.moving({'params': '10.0.0.1:1000'}) == ['10.0.0.1:1000']
    assert _asker(table, 'params') == [({'params': '10.0.0.1:3000'}, {})]
