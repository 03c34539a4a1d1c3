"""One headless Chromium for every end-to-end test that looks at the panel, and one system with
the default settings for the metrics and the saga tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from selenium.webdriver.remote.webdriver import WebDriver

from services.settings import Settings
from tests.support.browser import chromium
from tests.support.launcher_run import LauncherRun, running_system


@pytest.fixture(scope="package")
def browser() -> Iterator[WebDriver]:
    with chromium() as driver:
        yield driver


@pytest.fixture(scope="session")
def default_system() -> Iterator[tuple[LauncherRun, Settings]]:
    """A system with the default settings, shared by test_metrics.py and test_saga.py (one start
    fewer): the metrics run first (files in name order) and place their own orders; the saga's
    tests hold for every order the system has, and its last test damages data on purpose."""
    with running_system() as run:
        yield run, run.settings()
