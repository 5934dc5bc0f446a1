"""The launcher's address book when a node's run ends late: its new run's address stays."""

from __future__ import annotations

from launchpad_py.program import address
from launchpad_py.supervision.launch_kit.address_book import AddressBook


class _Issued:
    def register(self, value: str) -> None:
        pass


def _book(key: str) -> AddressBook:
    book = AddressBook('late_end', _Issued(), [])
    address.directory.expect([key])
    return book


def test_a_node_whose_run_ended_is_down_until_it_reports_again():
    """Its run ended: relocations wait (down) until the next run reports."""
    key = 'late_end/params/0/a'
    book = _book(key)
    try:
        book.report({key: '10.0.0.1:1000'})
        book.withdraw({key: '10.0.0.1:1000'})
        assert address.directory.is_down(key)
        book.report({key: '10.0.0.2:2000'})
        assert not address.directory.is_down(key) and book.version(key) == 2
    finally:
        address.directory.forget([key])


def test_the_old_run_ending_after_the_new_one_reported_keeps_the_new_address():
    """A deleted pod is started again before its old run's channel closes: that run ending
    late must not mark the new run's address down (found under podman by the Kubernetes
    fault runs: every client asking where the parameter server went waited forever)."""
    key = 'late_end/params/0/b'
    book = _book(key)
    try:
        book.report({key: '10.0.0.1:1000'})
        book.report({key: '10.0.0.1:3000'})  # The new pod reported first.
        book.withdraw({key: '10.0.0.1:1000'})  # Then the old run's end is seen.
        assert not address.directory.is_down(key)
        assert address.directory.known(key) == '10.0.0.1:3000'
    finally:
        address.directory.forget([key])
