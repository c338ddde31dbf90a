"""Browser tests (issue 14): the web console in real headless Chromium — Debian's
``chromium`` and ``chromium-driver`` (deploy/chromium.sh), never a downloaded build —
against the real stack and our services, started like the integration tests'.

A missing browser fails these tests; it never skips them (in CI or anywhere else).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service

from tests.support.console import running_console
from tests.support.services import Services
from tests.support.stack import REPO

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
SCREENSHOTS = REPO / "build" / "screenshots"


def _require_browser() -> None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} missing: run `bash deploy/chromium.sh` (as root) —"
            " browser tests fail without a browser, they never skip",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def console(services: Services) -> Iterator[str]:
    """The console process (``python -m services.console``) bound to the test services."""
    with running_console(services) as url:
        yield url


@pytest.fixture(scope="session")
def browser() -> Iterator[webdriver.Chrome]:
    _require_browser()
    # Both paths are given, so Selenium Manager has nothing to resolve; offline mode makes
    # sure it never tries to download a browser or a driver.
    os.environ["SE_OFFLINE"] = "true"
    opts = Options()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        opts.add_argument(arg)
    opts.add_argument("--window-size=1400,1000")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(CHROMEDRIVER))
    driver.implicitly_wait(0)
    yield driver
    driver.quit()


def shot(driver: webdriver.Chrome, name: str) -> Path:
    """A screenshot as a test artifact under build/screenshots/."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path
