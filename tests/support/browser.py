"""Headless Chromium for the browser tests (Debian's chromium and chromium-driver), where their
screenshots go, and reading text from pages whose fragments htmx keeps swapping."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from services.settings import PROJECT_ROOT

SCREENSHOTS = PROJECT_ROOT / "artifacts" / "screenshots"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


@contextmanager
def chromium() -> Iterator[WebDriver]:
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.fail("Debian's chromium and chromium-driver are needed: `make browser` installs them")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--window-size=1300,1600",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    try:
        yield driver
    finally:
        driver.quit()


def texts_of(driver: WebDriver, selector: str) -> list[str]:
    """The rendered text of every element matching `selector`, read in one script turn.

    The panel's fragments are swapped by htmx every few seconds; reading element by element from
    the test can meet an element replaced between finding and reading it (a stale reference).
    One script reads them all between two swaps.
    """
    script = "return Array.from(document.querySelectorAll(arguments[0]), e => e.innerText);"
    found: list[str] = driver.execute_script(script, selector)
    return found


def open_settled(driver: WebDriver, url: str, timeout: float = 15) -> None:
    """Open `url` and return once the fragments htmx asks for as the page loads have come in.

    Each one that comes in makes the page taller and moves what lies below it: a click aimed at a
    form while one was in flight could land on something else, and no request was sent. htmx marks
    an element `htmx-request` from the moment its request leaves until it is answered, and the
    page's `load` triggers have fired by the time the page has loaded.
    """
    driver.get(url)
    WebDriverWait(driver, timeout).until(
        lambda d: d.execute_script("return document.querySelectorAll('.htmx-request').length === 0")
    )
