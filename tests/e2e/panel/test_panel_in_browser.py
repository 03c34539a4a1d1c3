"""The two workshop scenarios, clicked through the panel in headless Chromium (Debian's chromium
and chromedriver; Selenium is pointed at them and downloads nothing).

Screenshots land in artifacts/screenshots/; the README shows copies of them from docs/images/.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from selenium.common.exceptions import TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select, WebDriverWait

from tests.e2e.panel.conftest import PanelSystem
from tests.support.browser import SCREENSHOTS, open_settled, texts_of


def _wait(driver: WebDriver, what: str, condition: Callable[[WebDriver], bool], timeout: float = 60) -> None:
    WebDriverWait(driver, timeout, poll_frequency=0.2).until(condition, message=f"waiting for {what}")


def _text_of(driver: WebDriver, selector: str) -> str:
    return " ".join(texts_of(driver, selector))


def _notice(driver: WebDriver, contains: str) -> str:
    """The notice once it says `contains`; a failure says what it said instead."""
    try:
        _wait(driver, f"the notice {contains!r}", lambda d: contains in _text_of(d, "#notice"), 30)
    except TimeoutException as error:
        raise AssertionError(f"{error.msg}; the notice said {_text_of(driver, '#notice')!r}") from None
    return _text_of(driver, "#notice")


def _arm(driver: WebDriver, process: str, point: str, action: str, times: str, stall_seconds: str = "5") -> None:
    form = driver.find_element(By.ID, f"arm-{process}")
    Select(form.find_element(By.NAME, "point")).select_by_visible_text(point)
    Select(form.find_element(By.NAME, "action")).select_by_visible_text(action)
    for name, value in (("times", times), ("stall_seconds", stall_seconds)):
        field = form.find_element(By.NAME, name)
        field.clear()
        field.send_keys(value)
    form.find_element(By.XPATH, ".//button[text()='Arm']").click()
    _notice(driver, f"armed {process}: {action} at {point}")


def _screenshot(driver: WebDriver, name: str) -> None:
    driver.execute_script("window.scrollTo(0, 0)")
    driver.save_screenshot(str(SCREENSHOTS / name))


def test_a_crash_after_commit_before_ack_is_redelivered_and_counted_as_a_duplicate(
    clean: PanelSystem, browser: WebDriver
) -> None:
    open_settled(browser, f"{clean.url}/chaos")
    _arm(browser, "inventory", "after_commit_before_ack", "crash", "1")

    browser.get(f"{clean.url}/orders")
    browser.find_element(By.ID, "place-order").click()
    placed = re.search(r"placed order ([0-9a-f-]{36})", _notice(browser, "placed order"))
    assert placed
    order_id = placed.group(1)

    browser.get(f"{clean.url}/orders/{order_id}")

    def story_told(driver: WebDriver) -> bool:
        crash = "inventory crashed at after_commit_before_ack" in _text_of(driver, "li.entry.fault")
        restart = "inventory process started again" in _text_of(driver, "li.entry.started")
        duplicate = "inventory-reservation-v1 OrderPlaced: duplicate" in _text_of(driver, "li.entry.duplicate")
        return crash and restart and duplicate and _text_of(driver, "#order-status") == "CONFIRMED"

    _wait(browser, "the crash, the restart and the duplicate on the timeline", story_told)
    entries = texts_of(browser, "li.entry")
    crash_at = next(i for i, e in enumerate(entries) if "crashed at after_commit_before_ack" in e)
    restart_at = next(i for i, e in enumerate(entries) if "inventory process started again" in e)
    duplicate_at = next(i for i, e in enumerate(entries) if "inventory-reservation-v1 OrderPlaced: duplicate" in e)
    assert crash_at < restart_at < duplicate_at, entries
    _screenshot(browser, "timeline-crash-redelivered-as-duplicate.png")

    browser.get(f"{clean.url}/overview")
    _wait(browser, "a green audit", lambda d: "Green: nothing lost" in _text_of(d, "#audit-verdict"))
    _wait(browser, "inventory's restart counted", lambda d: _text_of(d, "#process-inventory .restarts") != "0")
    _screenshot(browser, "overview-green-after-crash.png")


def test_check_then_act_under_a_duplicate_storm_turns_the_audit_red(clean: PanelSystem, browser: WebDriver) -> None:
    open_settled(browser, f"{clean.url}/chaos")
    form = browser.find_element(By.ID, "strategy-inventory")
    Select(form.find_element(By.NAME, "strategy")).select_by_visible_text("check_then_act")
    form.find_element(By.XPATH, ".//button[text()='Switch']").click()
    _notice(browser, "inventory now runs the teaching strategy check_then_act")
    _wait(browser, "the red banner", lambda d: "TEACHING STRATEGY ACTIVE" in _text_of(d, "#banner"), 15)
    # A slow handler: each member pauses a second between its check and its insert, as a busy
    # database would make it. The storm puts the same new message in both members' hands at once.
    _arm(browser, "inventory", "after_check", "stall", "2", stall_seconds="1")
    storm = browser.find_element(By.ID, "storm")
    copies = storm.find_element(By.NAME, "copies")
    copies.clear()
    copies.send_keys("20")
    storm.find_element(By.XPATH, ".//button[text()='Storm']").click()
    stormed = re.search(r"order ([0-9a-f-]{36}): its OrderPlaced sent 20 more times", _notice(browser, "more times"))
    assert stormed
    order_id = stormed.group(1)
    _screenshot(browser, "chaos-check-then-act-banner.png")

    browser.get(f"{clean.url}/")

    def doubled(driver: WebDriver) -> bool:
        on_the_map = driver.execute_script("return document.getElementById('map-auditor').textContent")
        return (
            "Red:" in _text_of(driver, "#audit-verdict")
            and "red:" in str(on_the_map)
            and any(
                order_id in row and "inventory decides once per order" in row for row in texts_of(driver, "tr.anomaly")
            )
        )

    _wait(browser, f"the auditor to name {order_id} as doubled", doubled)
    assert "TEACHING STRATEGY ACTIVE" in _text_of(browser, "#banner")
    _screenshot(browser, "overview-red-check-then-act.png")

    open_settled(browser, f"{clean.url}/chaos")
    browser.find_element(By.ID, "reset-all").click()
    _notice(browser, "every fault disarmed")
    _wait(browser, "the banner to go", lambda d: "TEACHING" not in _text_of(d, "#banner"), 15)
