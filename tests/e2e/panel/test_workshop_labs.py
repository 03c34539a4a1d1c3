"""Every workshop lab that runs on the built-in relay, run unattended against a system of its own
(the panel tests' system; this module runs after theirs, since the teaching labs leave anomalies
behind on purpose), exactly as `make lab NAME=…` runs it; then the page the lab points at is
screenshotted (tests/support/workshop.py). The lab that needs RELAY=debezium runs in
tests/e2e/test_debezium_relay_system.py, on that system; the one that needs the share groups, in
tests/e2e/test_share_groups_system.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from selenium.webdriver.remote.webdriver import WebDriver

from labs.catalog import LABS
from labs.client import PanelClient
from labs.lab import Lab, run
from tests.e2e.panel.conftest import PanelSystem
from tests.support.workshop import run_and_screenshot

ON_THE_BUILT_IN_RELAY = [
    lab for lab in LABS if lab.relay == "builtin" and lab.postgres == "single" and not lab.share_groups
]
"""Lab 17 needs a PostgreSQL pair: tests/e2e/test_soak.py runs it on the soak's. Lab 18 needs the
share groups: tests/e2e/test_share_groups_system.py runs it on its system."""


@pytest.fixture(scope="module")
def panel(system: PanelSystem) -> Iterator[PanelClient]:
    """One client for every lab, as `make lab NAME=all` has: it knows the orders labs lost on purpose."""
    client = PanelClient(system.url)
    yield client
    client.close()


@pytest.mark.parametrize("lab", ON_THE_BUILT_IN_RELAY, ids=[lab.name for lab in ON_THE_BUILT_IN_RELAY])
def test_lab(panel: PanelClient, browser: WebDriver, lab: Lab) -> None:
    run_and_screenshot(lab, panel, browser)


def test_a_lab_for_the_other_relay_refuses_to_start_and_says_how_to_run_it(panel: PanelClient) -> None:
    lines: list[str] = []
    debezium = next(lab for lab in LABS if lab.relay == "debezium")
    result = run(debezium, panel, say=lines.append)
    assert not result.passed
    assert any("needs RELAY=debezium" in line and "make up RELAY=debezium" in line for line in lines), lines


def test_a_lab_for_the_share_groups_refuses_to_start_and_says_how_to_run_it(panel: PanelClient) -> None:
    lines: list[str] = []
    shared = next(lab for lab in LABS if lab.share_groups)
    result = run(shared, panel, say=lines.append)
    assert not result.passed
    assert any("needs the share groups" in line and "make up SHARE_GROUPS=on" in line for line in lines), lines
