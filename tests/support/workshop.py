"""A workshop lab run unattended, exactly as `make lab NAME=…` runs it, then the page it points at
screenshotted in headless Chromium (artifacts/screenshots/labs/; docs/workshop/images/ holds the
copies the lab texts show)."""

from __future__ import annotations

from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from labs.client import PanelClient
from labs.lab import Lab, run
from tests.support.browser import SCREENSHOTS, texts_of

READY = {
    "/orders/": "li.entry",  # an order's timeline has been drawn
    "/dead-letters": "table tr td",
    "/chaos#debezium": "#cdc-slots .legend",  # the slots' chart has its lines
    "/": "#audit-verdict",
}


def _ready_selector(look: str) -> str:
    return next(selector for prefix, selector in READY.items() if look.startswith(prefix))


def run_and_screenshot(lab: Lab, panel: PanelClient, browser: WebDriver) -> None:
    lines: list[str] = []
    result = run(lab, panel, say=lines.append)
    failed = "; ".join(f"{c.claim} [{c.evidence}]" for c in result.checks if not c.passed) or "no check ran"
    # What failed comes first: a test summary shows an assertion's first line only.
    assert result.passed, f"lab {lab.number} failed: {failed}\n" + "\n".join(lines)

    browser.get(f"{panel.url}{result.look}")
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
    _, _, anchor = result.look.partition("#")
    if anchor:
        browser.execute_script("document.getElementById(arguments[0]).scrollIntoView()", anchor)
    else:
        browser.execute_script("window.scrollTo(0, 0)")
    browser.save_screenshot(str(folder / f"{lab.number:02d}-{lab.name}.png"))
