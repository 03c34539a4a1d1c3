"""Every workshop lab, run unattended against a system of its own (the panel tests' system; this
module runs after theirs, since the teaching labs leave anomalies behind on purpose), exactly as
`make lab NAME=…` runs it; then the page the lab points at is screenshotted in headless Chromium
(artifacts/screenshots/labs/; docs/workshop/images/ holds copies the lab texts show)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from labs.catalog import LABS
from labs.client import PanelClient
from labs.lab import Lab, run
from tests.e2e.panel.conftest import SCREENSHOTS, PanelSystem, texts_of

READY = {
    "/orders/": "li.entry",  # an order's timeline has been drawn
    "/dead-letters": "table tr td",
    "/": "#audit-verdict",
}


def _ready_selector(look: str) -> str:
    return next(selector for prefix, selector in READY.items() if look.startswith(prefix))


@pytest.fixture(scope="module")
def panel(system: PanelSystem) -> Iterator[PanelClient]:
    """One client for every lab, as `make lab NAME=all` has: it knows the orders labs lost on purpose."""
    client = PanelClient(system.url)
    yield client
    client.close()


@pytest.mark.parametrize("lab", LABS, ids=[lab.name for lab in LABS])
def test_lab(system: PanelSystem, panel: PanelClient, browser: WebDriver, lab: Lab) -> None:
    lines: list[str] = []
    result = run(lab, panel, say=lines.append)
    assert result.passed, "\n".join(lines)

    browser.get(f"{system.url}{result.look}")
    selector = _ready_selector(result.look)
    WebDriverWait(browser, 30, poll_frequency=0.2).until(
        lambda d: texts_of(d, selector), message=f"{result.look} to show {selector}"
    )
    if result.look == "/":
        WebDriverWait(browser, 30, poll_frequency=0.2).until(
            lambda d: any(result.order_id in row for row in texts_of(d, "tr.anomaly")),
            message=f"the verdict to name {result.order_id}",
        )
    folder = SCREENSHOTS / "labs"
    folder.mkdir(parents=True, exist_ok=True)
    browser.execute_script("window.scrollTo(0, 0)")
    browser.save_screenshot(str(folder / f"{lab.number:02d}-{lab.name}.png"))
