"""The dashboard in a real headless Chromium: every node shows, a failure turns red with its traceback.

Needs chromium and chromedriver (apt-get install chromium chromium-driver) and
selenium (in the [dev] extra); skipped, saying which is missing, otherwise.
The screenshots in docs/observability.md come from scripts/observability_docs.py.
"""

from __future__ import annotations

import shutil

import pytest

import launchpad_py as lp
from conftest import needs_ssh_hosts, ssh_host
from restart_nodes import Member
from tests.observe_nodes import Bomb, Counted, call_forever

CHROMIUM = shutil.which('chromium') or shutil.which('chromium-browser')
CHROMEDRIVER = shutil.which('chromedriver')
try:
    from selenium import webdriver
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:
    webdriver = None

pytestmark = [
    pytest.mark.skipif(webdriver is None, reason='selenium is not installed (pip install selenium)'),
    pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                       reason='chromium/chromedriver not found (apt-get install -y chromium '
                              'chromium-driver)'),
]
NODES = ['server/0', 'bomb/0', 'client/0', 'client/1']


@pytest.fixture
def browser():
    options = webdriver.ChromeOptions()
    for argument in ('--headless=new', '--no-sandbox', '--disable-gpu', '--window-size=1400,1000',
                     '--disable-dev-shm-usage'):
        options.add_argument(argument)
    options.binary_location = CHROMIUM
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def program():
    program = lp.Program('browsed')
    server = program.add_node(lp.CourierNode(Counted), label='server')
    bomb = program.add_node(lp.CourierNode(Bomb), label='bomb')
    with program.group('client'):
        for _ in range(2):
            program.add_node(lp.PyNode(call_forever, server))
    controller = lp.launch(program, launch_type='local_mp', dashboard=True)
    try:
        yield controller, bomb
    finally:
        controller.stop()
        controller.dashboard.close()
    assert controller.killed_nodes == []  # Every node heeds the stop: none waits out the grace.


def _state(driver, node: str) -> str | None:
    cards = driver.find_elements(By.CSS_SELECTOR, f'.card[data-node="{node}"]')
    return cards[0].get_attribute('data-state') if cards else None


def test_page_shows_every_node_running(browser, program):
    """Every node has a card and a box in the graph, and each turns 'running'."""
    controller, _ = program
    browser.get(controller.dashboard.url)
    WebDriverWait(browser, 30).until(
        lambda d: all(_state(d, node) == 'running' for node in NODES))
    boxes = browser.find_elements(By.CSS_SELECTOR, '#graph g.gnode')
    assert sorted(b.get_attribute('data-node') for b in boxes) == sorted(NODES)
    assert all('state-running' in b.get_attribute('class') for b in boxes)
    WebDriverWait(browser, 30).until(  # The server's calls show up as a method row.
        lambda d: 'echo' in d.find_element(By.CSS_SELECTOR,
                                           '.card[data-node="server/0"] .methods').text)


def test_failed_node_turns_red_with_its_traceback(browser, program):
    """After the bomb node raises, its card and box say 'failed' and show the traceback."""
    controller, bomb = program
    browser.get(controller.dashboard.url)
    WebDriverWait(browser, 30).until(lambda d: _state(d, 'bomb/0') == 'running')
    bomb.dereference().futures.arm()  # Its reply may never come: the node dies.
    with pytest.raises(lp.NodeFailedError):
        controller.wait(timeout=60)
    WebDriverWait(browser, 30).until(lambda d: _state(d, 'bomb/0') == 'failed')
    box = browser.find_element(By.CSS_SELECTOR, '#graph g[data-node="bomb/0"]')
    assert 'state-failed' in box.get_attribute('class')
    traceback = browser.find_element(By.CSS_SELECTOR, '.card[data-node="bomb/0"] .traceback')
    assert traceback.is_displayed()
    assert 'RuntimeError: the bomb went off as the test asked' in traceback.text
    assert _state(browser, 'server/0') == 'stopped'


def test_big_group_is_one_card_of_counts_whose_members_open_a_page_at_a_time(browser):
    """A group over COLLAPSE_OVER nodes shows 'running N' on one card and one graph box;
    opening its members shows the first page of member cards, running; 'next' the rest."""
    from launchpad_py.observability.group_summary import COLLAPSE_OVER
    size = COLLAPSE_OVER + 60  # Two pages of 50.
    program = lp.Program('crowded')
    with program.group('worker'):
        for _ in range(size):
            program.add_node(lp.CourierNode(Counted))
    controller = lp.launch(program, launch_type='local_mt', dashboard=True)
    try:
        browser.get(controller.dashboard.url)
        card = browser.find_element(By.CSS_SELECTOR, '.group-card[data-group="worker"]')
        WebDriverWait(browser, 30).until(lambda d: card.get_attribute('data-counts')
                                         == f'running {size}')
        assert not browser.find_elements(By.CSS_SELECTOR, '#graph g[data-node]')
        assert 'state-running' in browser.find_element(
            By.CSS_SELECTOR, '#graph g[data-group="worker"]').get_attribute('class')
        card.find_element(By.CSS_SELECTOR, 'summary').click()
        WebDriverWait(browser, 30).until(lambda d: _state(d, 'worker/49') == 'running')
        assert _state(browser, 'worker/50') is None
        card.find_element(By.CSS_SELECTOR, '.next').click()
        WebDriverWait(browser, 30).until(lambda d: _state(d, f'worker/{size - 1}') == 'running')
        assert _state(browser, 'worker/0') is None
    finally:
        controller.stop()
        controller.dashboard.close()


@needs_ssh_hosts
def test_a_node_restarted_after_its_host_was_lost_shows_why_on_its_card(browser):
    """Under ssh, the session to the node's host dropped (as by a network cut): the node comes
    back uncounted, and its card says so next to its restarts: '1 (host_lost 1)'."""
    from test_lost_nodes import _back_after, _drop_session_to
    program = lp.Program('lost_on_page')
    program.add_node(lp.CourierNode(Member), label='member')
    host = ssh_host('h2')
    controller = lp.launch(program, launch_type='ssh', resources={'member': host},
                           failure_policy={'member': lp.Restart(max_restarts=0,
                                                                backoff=(0.05, 0.2))},
                           dashboard=True)
    try:
        browser.get(controller.dashboard.url)
        WebDriverWait(browser, 30).until(lambda d: _state(d, 'member/0') == 'running')
        _drop_session_to(host.host)
        _back_after(controller, 1)
        card = browser.find_element(By.CSS_SELECTOR, '.card[data-node="member/0"] .stats')
        WebDriverWait(browser, 30).until(lambda d: '1 (host_lost 1)' in card.text)
    finally:
        controller.stop()
        controller.dashboard.close()
