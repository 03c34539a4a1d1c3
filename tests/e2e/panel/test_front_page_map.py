"""The front page alone, as a first-time learner meets it in headless Chromium: click the
inventory box on the live map, crash it between commit and acknowledgement, place an order, and
read on the map that inventory went down, came back and counted the redelivery as a duplicate;
then open the order from the answer and read the same there. Screenshots go to
artifacts/screenshots/ (docs/images/ holds the copies the README shows)."""

from __future__ import annotations

import re
from collections.abc import Callable

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from tests.e2e.panel.conftest import PanelSystem
from tests.support.browser import SCREENSHOTS, texts_of
from tests.support.waiting import wait_for


def _wait(driver: WebDriver, what: str, condition: Callable[[WebDriver], bool], timeout: float = 60) -> None:
    WebDriverWait(driver, timeout, poll_frequency=0.2).until(condition, message=f"waiting for {what}")


def _box_text(driver: WebDriver, box: str) -> str:
    """What a box on the map says (SVG text has no innerText: its textContent, one script turn)."""
    script = "const b = document.getElementById(arguments[0]); return b ? b.textContent : '';"
    return " ".join(str(driver.execute_script(script, f"map-{box}")).split())


def _box_class(driver: WebDriver, box: str) -> str:
    script = "const b = document.getElementById(arguments[0]); return b ? b.getAttribute('class') : '';"
    return str(driver.execute_script(script, f"map-{box}"))


def _click_box(driver: WebDriver, box: str) -> None:
    """Click a box on the map in one script turn: htmx swaps the whole map every 2 s, so a box
    found by the test can be replaced before the test's click reaches it (a stale reference).
    A person's click lands on whichever box is drawn at that moment; so does this one."""
    script = (
        "document.getElementById(arguments[0])"
        ".dispatchEvent(new MouseEvent('click', {bubbles: true, cancelable: true, view: window}));"
    )
    driver.execute_script(script, f"map-{box}")


def _duplicates(driver: WebDriver, box: str) -> int:
    found = re.search(r"Σ [\d,]+ applied · ([\d,]+) dup", _box_text(driver, box))
    return int(found.group(1).replace(",", "")) if found else -1


def test_from_the_front_page_alone_a_learner_crashes_a_consumer_and_reads_the_duplicate(
    clean: PanelSystem, browser: WebDriver
) -> None:
    browser.get(f"{clean.url}/")
    _wait(
        browser, "the map to draw inventory", lambda d: "inventory-reservation-v1" in _box_text(d, "consumer-inventory")
    )
    assert {"up", "back"} & set(_box_class(browser, "consumer-inventory").split())
    restarts = clean.state("inventory")["restarts"]

    _click_box(browser, "consumer-inventory")
    _wait(browser, "the inventory card", lambda d: bool(d.find_elements(By.CSS_SELECTOR, "#act #crash-after-commit")))
    browser.find_element(By.CSS_SELECTOR, "#crash-after-commit button").click()
    _wait(
        browser,
        "the fault armed",
        lambda d: "armed inventory: crash at after_commit_before_ack" in " ".join(texts_of(d, "#notice")),
    )

    browser.find_element(By.CSS_SELECTOR, "#place-order button").click()
    _wait(browser, "the order placed", lambda d: bool(d.find_elements(By.ID, "notice-order")))
    placed = re.search(r"placed order ([0-9a-f-]{36})", " ".join(texts_of(browser, "#notice")))
    assert placed
    order_id = placed.group(1)

    _wait(browser, "inventory to be restarted", lambda _: clean.state("inventory")["restarts"] > restarts)

    def back_with_its_duplicate(driver: WebDriver) -> bool:
        # A box's totals count from its process's start: the restarted one's first duplicate is the redelivery.
        box = _box_text(driver, "consumer-inventory")
        back = "back" in _box_class(driver, "consumer-inventory").split() and "↻ back" in box
        return back and _duplicates(driver, "consumer-inventory") >= 1

    _wait(browser, "inventory back on the map, the redelivery counted a duplicate", back_with_its_duplicate)
    _wait(browser, "the auditor green on the map", lambda d: "green: nothing lost" in _box_text(d, "auditor"))
    browser.execute_script("window.scrollTo(0, 0)")
    browser.save_screenshot(str(SCREENSHOTS / "map-crash-after-commit.png"))

    browser.find_element(By.ID, "notice-order").click()
    _wait(browser, "the order's page", lambda d: order_id in d.current_url)
    _wait(
        browser,
        "the duplicate on the order's page",
        lambda d: any(
            "inventory-reservation-v1 OrderPlaced: duplicate" in t for t in texts_of(d, "li.entry.duplicate")
        ),
    )
    duplicate = next(t for t in texts_of(browser, "li.entry.duplicate") if "inventory-reservation-v1" in t)
    assert re.search(r"orders\.events/\d+ @ \d+", duplicate), duplicate  # the copy's partition and offset

    def proven(driver: WebDriver) -> str:
        return " ".join(texts_of(driver, "#proof-reservation"))

    _wait(browser, "the reservation's proof to say why once", lambda d: "Once: OrderPlaced reached" in proven(d))
    reservation = proven(browser)
    assert "the claim won" in reservation and "the claim found the marker" in reservation, reservation
    _wait(browser, "every effect proven", lambda d: len(texts_of(d, "section.proof.once")) == 4, 60)
    assert not texts_of(browser, "section.proof.wrong")
    browser.execute_script("document.getElementById('proof').scrollIntoView()")
    browser.save_screenshot(str(SCREENSHOTS / "order-proof-after-crash.png"))


def test_a_box_for_no_such_process_is_refused_and_the_map_speaks_in_words(clean: PanelSystem) -> None:
    assert clean.panel.get("/fragments/act/no-such-process").status_code == 404
    wait_for(lambda: clean.state("inventory")["up"], 60, "inventory to answer (an earlier test may have crashed it)")
    page = clean.panel.get("/").text
    words = page[page.find('<desc id="map-words">') :]
    boxes = {box["id"]: box for box in clean.panel.get("/api/map").json()["boxes"]}
    inventory = boxes["consumer-inventory"]
    assert inventory["state"] in ("up", "back") and any(line.startswith("Σ ") for line in inventory["lines"]), inventory
    assert re.search(r"inventory \((up|back)\): ", words), words[:900]  # every box, in words, for screen readers
