"""One headless Chromium for every end-to-end test that looks at the panel."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from selenium.webdriver.remote.webdriver import WebDriver

from tests.support.browser import chromium


@pytest.fixture(scope="package")
def browser() -> Iterator[WebDriver]:
    with chromium() as driver:
        yield driver
